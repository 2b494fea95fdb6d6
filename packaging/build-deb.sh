#!/usr/bin/env bash
# Build raswarden_VERSION-1_ARCH.deb: the service in its own virtual environment under /opt/raswarden (every
# Python dependency inside: a management node needs no package mirror for them, only Debian's python3 and
# systemd), the unit, sysusers.d and tmpfiles.d files, the minimal config as a conffile, the CLI on PATH, the
# licence and the docs. Usage:
#   packaging/build-deb.sh [--out DIR] [--wheelhouse DIR] [--uncompressed]
# --wheelhouse: install the dependencies from that directory of wheels only (pip download -d DIR raswarden's
# dependencies on a machine with access), for a build host without one. --uncompressed: a larger file written in
# seconds (the tests'); a release is xz-compressed (about 100 MB for 480 MB installed).
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist
wheelhouse=""
compress=(-Zxz)
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --wheelhouse) wheelhouse=$2; shift 2 ;;
    --uncompressed) compress=(-Znone); shift ;;
    *) echo "build-deb: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v dpkg-deb >/dev/null || { echo "build-deb: needs dpkg-deb (Debian/Ubuntu)" >&2; exit 1; }
PY=/usr/bin/python3   # the interpreter the installed venv runs on: Debian's own
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "build-deb: needs Debian's python3 3.11 or newer" >&2; exit 1; }
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
# The venv links the interpreter it was made with: /usr/bin/python3.11 is the python3.11 package's, which the
# package depends on; /usr/bin/python3 is python3-minimal's, which a minimal Debian may lack (issue 54)
PY=/usr/bin/python$pyver
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
arch=$(dpkg --print-architecture)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/root
venv=$stage/opt/raswarden

# the wheel, as a release builds it
builder=${BUILD_PYTHON:-.venv/bin/python}
[ -x "$builder" ] || builder=$PY
if "$builder" -c 'import build' 2>/dev/null; then
  "$builder" -m build --wheel --outdir "$work/wheel" . >/dev/null
else
  "$builder" -m pip wheel -q --no-deps -w "$work/wheel" .
fi
# the venv where it will live, built in the staging root and moved by path
"$PY" -m venv "$venv"
pipargs=(--disable-pip-version-check -q)
[ -n "$wheelhouse" ] && pipargs+=(--no-index --find-links "$wheelhouse")
"$venv/bin/python" -m pip install "${pipargs[@]}" "$work"/wheel/raswarden-*.whl
"$venv/bin/python" -m pip uninstall -q -y pip setuptools >/dev/null 2>&1 || true
# scripts name their interpreter by absolute path: the staging path becomes the installed one
grep -rlI --null "$stage" "$venv/bin" | xargs -0 -r sed -i "s|$stage||g"
find "$venv" -name __pycache__ -type d -prune -exec rm -rf {} +
# the dependencies' own test suites (a third of the files; nothing imports them at run time)
find "$venv/lib" -type d \( -name tests -o -name testing_data \) -path '*/site-packages/*/*' -prune -exec rm -rf {} +
# compiled here, for the path it will have (the service cannot write them: ProtectSystem=strict), so dpkg owns
# them and removes them with the rest
"$PY" -m compileall -q -j 0 -s "$stage" -p / "$venv/lib" >/dev/null

install -D -m 0644 systemd/raswarden.service "$stage/usr/lib/systemd/system/raswarden.service"
# raswarden@NAME: more than one instance on a management node (/etc/raswarden/NAME.toml each)
systemd/instance-unit.sh systemd/raswarden.service > "$work/raswarden@.service"
install -D -m 0644 "$work/raswarden@.service" "$stage/usr/lib/systemd/system/raswarden@.service"
install -D -m 0644 systemd/raswarden.sysusers "$stage/usr/lib/sysusers.d/raswarden.conf"
install -D -m 0644 systemd/raswarden.tmpfiles "$stage/usr/lib/tmpfiles.d/raswarden.conf"
install -D -m 0640 systemd/raswarden.toml "$stage/etc/raswarden/raswarden.toml"
install -d -m 0755 "$stage/usr/bin"
ln -s /opt/raswarden/bin/raswarden "$stage/usr/bin/raswarden"
doc=$stage/usr/share/doc/raswarden
install -D -m 0644 LICENSE "$doc/copyright"
install -m 0644 docs/install.md systemd/raswarden.toml.example README.md "$doc/"
install -D -m 0644 packaging/kubernetes/rbac.yaml "$doc/kubernetes/rbac.yaml"
install -D -m 0644 packaging/kubernetes/deployment.yaml "$doc/kubernetes/deployment.yaml"

install -d "$stage/DEBIAN"
size=$(du -sk "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: raswarden
Version: $version-1
Architecture: $arch
Maintainer: raswarden developers <raswarden@localhost>
Installed-Size: $size
Depends: python$pyver, systemd (>= 251)
Recommends: slurm-client, munge
Section: admin
Priority: optional
Description: fault-recovery daemon for AI supernode clusters
 Reads RAS, link and thermal telemetry (dcgm-exporter, node_exporter, Prometheus, journald, rasdaemon,
 sysfs), flags sub-healthy accelerators, blades and links, and drives checkpoint and drain through Slurm under
 guards, with alerts to ops chat. Its Python dependencies live in /opt/raswarden.
CONTROL
echo /etc/raswarden/raswarden.toml > "$stage/DEBIAN/conffiles"
cat > "$stage/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  systemd-sysusers raswarden.conf
  systemd-tmpfiles --create raswarden.conf
  chgrp raswarden /etc/raswarden/raswarden.toml && chmod 0640 /etc/raswarden/raswarden.toml
  if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
  echo "raswarden: not started; see /usr/share/doc/raswarden/install.md (raswarden init, then systemctl enable --now raswarden)"
fi
SCRIPT
cat > "$stage/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then systemctl stop raswarden.service 'raswarden@*.service' || true; fi
SCRIPT
cat > "$stage/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
# purge: the state, and the configuration (the conffile, what 'raswarden init' wrote, the credentials)
if [ "$1" = purge ]; then rm -rf /var/lib/raswarden /opt/raswarden /etc/raswarden; fi
if [ "$1" = remove ] || [ "$1" = purge ]; then
  if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
SCRIPT
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
mkdir -p "$out"
deb="$out/raswarden_${version}-1_${arch}.deb"
dpkg-deb --root-owner-group "${compress[@]}" --build "$stage" "$deb" >/dev/null
echo "$deb"
