#!/bin/sh
# raswarden@.service, written from raswarden.service (packaging/build-deb.sh installs both): one instance per
# config file /etc/raswarden/NAME.toml, started as raswarden@NAME, so that one management node can serve several
# shards, or stand as a spare (a pool member, service.shard = "*") beside the shard it serves (docs/install.md).
# Everything else is the unit's own, sandbox included. Each instance gets a runtime directory of its own,
# /run/raswarden-NAME: stopping one must not remove another's reload answers, nor raswarden.service's
# /run/raswarden. The state, configuration and credentials directories are shared.
set -eu
unit=${1:-$(dirname "$0")/raswarden.service}
sed -e '1s|^# raswarden on a management node.*|# raswarden instance %i: /etc/raswarden/%i.toml (written from raswarden.service by systemd/instance-unit.sh).|' \
    -e 's|^Description=.*|& (%i)|' \
    -e 's|/etc/raswarden/raswarden\.toml|/etc/raswarden/%i.toml|g' \
    -e 's|^RuntimeDirectory=raswarden$|RuntimeDirectory=raswarden-%i|' \
    "$unit"
