#!/usr/bin/env bash
# Set up raswarden and run the whole test suite, with the real components the tests need
# (PostgreSQL on loopback, Prometheus's promtool, Alertmanager, Slurm with munge, a kube-apiserver and ipmi_exporter
# built with Go, OpenIPMI's BMC simulator).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

pg_started=0
if [ "$(id -u)" = 0 ]; then
  # promtool (Debian package prometheus) checks the simulator's OpenMetrics output; the alerting tests
  # start a real Alertmanager (prometheus-alertmanager) on loopback.
  # systemd-journal-remote writes real journal files for the journald collector's journalctl test; strace
  # traces a real run against the unit's system-call filter; chromium renders the status page;
  # systemd-nspawn (systemd-container) boots a container whose systemd starts the packaged unit; promtool and
  # VictoriaMetrics (victoria-metrics) dump and export a fleet's long-term storage for the readers' tests; openssl
  # and curl make the Kubernetes lab's certificates and wait for its API server (scripts/kube-lab.sh); locales-all
  # gives the C library's month and weekday names that journalctl and dmesg -T print in other languages; OpenIPMI's
  # ipmi_sim (openipmi) is the BMC that the real FreeIPMI (freeipmi-tools), ipmitool and ipmi_exporter read
  # (scripts/bmc-lab.sh); rasdaemon's ras-mc-ctl lists a database for the ras-mc-ctl reader's test (it stops at
  # start-up without modprobe: kmod).
  if ! command -v promtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null \
      || [ ! -x /lib/systemd/systemd-journal-remote ] || ! command -v strace >/dev/null \
      || ! command -v chromium >/dev/null || ! command -v systemd-nspawn >/dev/null \
      || ! command -v victoria-metrics >/dev/null || ! command -v openssl >/dev/null || ! command -v curl >/dev/null \
      || [ ! -d /usr/lib/locale/zh_CN.utf8 ] || ! command -v ipmi_sim >/dev/null || [ ! -x /usr/sbin/ipmimonitoring ] \
      || ! command -v ipmitool >/dev/null || ! command -v ras-mc-ctl >/dev/null || ! command -v modprobe >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
      prometheus-alertmanager systemd-journal-remote strace chromium systemd-container victoria-metrics \
      openssl curl locales-all openipmi freeipmi-tools ipmitool rasdaemon kmod >/dev/null
  fi
  ./scripts/slurm-lab.sh install  # the playbook tests start their own Slurm labs with it (one with slurmdbd)
  ./scripts/pg-lab.sh install
  RASWARDEN_TEST_PG_URL=$(./scripts/pg-lab.sh up)
  export RASWARDEN_TEST_PG_URL
  pg_started=1
else
  echo "test: not root, so PostgreSQL, promtool, Alertmanager and Slurm are not installed; their tests skip (and fail" \
       "under CI=true)" >&2
fi
if command -v go >/dev/null; then
  # kube-apiserver and etcd from their Go modules for the Kubernetes tests (scripts/kube/go.mod): several minutes
  # the first time on two cores, then cached in build/kube
  ./scripts/kube-lab.sh build
  ./scripts/bmc-lab.sh build  # ipmi_exporter from its Go module (scripts/bmc/go.mod), cached in build/bmc
else
  echo "test: no Go, so kube-apiserver and ipmi_exporter are not built; the Kubernetes and BMC tests skip (and fail" \
       "under CI=true)" >&2
fi
cleanup() { [ "$pg_started" = 1 ] && ./scripts/pg-lab.sh down || true; }
trap cleanup EXIT

set +e
# Three worker processes (RASWARDEN_TEST_WORKERS; 0 runs in this one): tests of one shared server stay in one worker
# (tests/conftest.py SHARED). A third keeps both cores of a two-core machine busy while one worker waits on a server
# (Slurm, the booting container, the live simulator): 686 s for 666 tests, against 874 s for 637 with two, each on a
# clean clone of its day, 2026-11-27.
.venv/bin/python -m pytest -n "${RASWARDEN_TEST_WORKERS:-3}" --dist loadgroup "$@"
rc=$?
set -e
exit $rc
