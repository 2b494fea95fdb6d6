#!/usr/bin/env bash
# A real single-host Slurm for raswarden's tests: munged + slurmctld + one slurmd per fake node
# (node1..nodeN), all on loopback under $LAB_DIR. No systemd, no cgroups; accounting only when asked for
# (LAB_ACCOUNTING=1: a private MariaDB and slurmdbd, which Slurm's user admin levels need).
#
#   scripts/slurm-lab.sh install    apt-get install slurmctld slurmd slurm-client munge slurmdbd mariadb-server
#                                   (idempotent; root; services the packages may start are not used: the lab
#                                   runs its own daemons on its own ports and sockets)
#   scripts/slurm-lab.sh up [N]     (re)start a fresh lab with N nodes (default 4); prints SLURM_CONF's path
#   scripts/slurm-lab.sh down       cancel jobs, stop every process this lab started (by PID, checked)
#   scripts/slurm-lab.sh status
#   scripts/slurm-lab.sh boot NODE  start NODE's slurmd as a machine just booted (after a reboot that hung)
#
# scontrol reboot works: slurm.conf's RebootProgram stops the node's slurmd and starts it again in a time namespace
# of its own whose clock says it booted a moment ago, so Slurm sees a new boot time and completes the reboot (the
# node keeps a drain it had). A file LAB_DIR/reboot/NODE.hang makes the node's next reboot never come back (its
# slurmd stopped, not started again: Slurm's "reboot timed out" after ResumeTimeout) until `boot NODE`.
#
# Env: LAB_DIR (/tmp/raswarden-slurm), LAB_CTLD_PORT (16817), LAB_NODE_PORT_BASE (17000),
# LAB_SLURMD_TIMEOUT (10 s to mark a dead node DOWN), LAB_CRED_EXPIRE (10 s before a requeued job restarts),
# LAB_ACCOUNTING (0; 1 adds mariadbd on 127.0.0.1:LAB_DB_PORT (LAB_CTLD_PORT+2000) and slurmdbd on
# LAB_DBD_PORT (LAB_CTLD_PORT+1) with the cluster registered, so `sacctmgr` works with SLURM_CONF).
# Keep every port under the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by
# default): a port in it can be any connection's local port when a daemon binds it; `up` warns of one.
# Settings verified on Debian 12 with Slurm 22.05: cred_expire and a 2 s scheduler
# interval make a requeued job restart in about 11 s instead of two minutes.
set -euo pipefail

LAB_DIR=${LAB_DIR:-/tmp/raswarden-slurm}
case "$LAB_DIR" in /tmp/*) ;; *) echo "LAB_DIR must be under /tmp" >&2; exit 2;; esac
CTLD_PORT=${LAB_CTLD_PORT:-16817}
NODE_PORT_BASE=${LAB_NODE_PORT_BASE:-17000}
SLURMD_TIMEOUT=${LAB_SLURMD_TIMEOUT:-10}
CRED_EXPIRE=${LAB_CRED_EXPIRE:-10}
ACCOUNTING=${LAB_ACCOUNTING:-0}
DBD_PORT=${LAB_DBD_PORT:-$((CTLD_PORT + 1))}
DB_PORT=${LAB_DB_PORT:-$((CTLD_PORT + 2000))}
DB_SOCK=$LAB_DIR/mysql/mysqld.sock
CONF=$LAB_DIR/etc/slurm.conf
MSOCK=$LAB_DIR/munge-run/munge.socket.2
export SLURM_CONF=$CONF

log() { printf '[slurm-lab] %s\n' "$*" >&2; }
# a failed `up` stops what it started (its logs stay in LAB_DIR), so no daemon of it holds a port or socket after
die() { log "FATAL: $*"; if [ "${UP_STARTED:-0}" = 1 ]; then cmd_down >/dev/null 2>&1 || true; fi; exit 1; }
wait_for() { local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.25; done; }
alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
kill_pidfile() { # FILE COMM: kill the PID in FILE only if it still runs COMM
  local f=$1 comm=$2 pid; [ -s "$f" ] || return 0; pid=$(cat "$f")
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do alive "$pid" || break; sleep 0.25; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"; }

cmd_install() {
  local pkgs="slurmctld slurmd slurm-client munge slurmdbd mariadb-server"
  dpkg -s $pkgs >/dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "installing Slurm needs root"
  apt-get update -qq
  # Debian's policy-rc.d (or no init) keeps the postinst from starting the daemons: what we want.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
}

write_conf() {
  local n=$1 host; host=$(hostname -s)
  cat > "$CONF" <<EOF
ClusterName=raswarden-lab
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${MSOCK},cred_expire=${CRED_EXPIRE}
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmctldPort=${CTLD_PORT}
StateSaveLocation=${LAB_DIR}/state
SlurmdSpoolDir=${LAB_DIR}/spool/%n
SlurmctldPidFile=${LAB_DIR}/run/slurmctld.pid
SlurmdPidFile=${LAB_DIR}/run/slurmd-%n.pid
SlurmctldLogFile=${LAB_DIR}/log/slurmctld.log
SlurmdLogFile=${LAB_DIR}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
MpiDefault=none
MailProg=/bin/true
# scontrol reboot: restarts the node's slurmd as if its machine had booted (reboot_self below)
RebootProgram=${LAB_DIR}/etc/reboot
ResumeTimeout=30
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=${SLURMD_TIMEOUT}
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=node[1-${n}] NodeHostname=${host} NodeAddr=127.0.0.1 Port=[$((NODE_PORT_BASE+1))-$((NODE_PORT_BASE+n))] CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

accounting_conf() {
  if [ "$ACCOUNTING" = 1 ]; then
    printf 'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStoragePort=%s\nAccountingStoragePass=%s\n' \
      "$DBD_PORT" "$MSOCK"  # Pass: the munge socket slurmdbd's connections authenticate with
  else
    echo "AccountingStorageType=accounting_storage/none"
  fi
}

# Accounting: a MariaDB of the lab's own (datadir, socket and port under $LAB_DIR; no system service touched),
# slurmdbd on it, and the cluster registered, all before slurmctld starts.
accounting_up() {
  command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null \
    || die "slurmdbd or mariadb-server is not installed: run '$0 install' as root"
  mkdir -p "$LAB_DIR/mysql"
  mariadb-install-db --no-defaults --datadir="$LAB_DIR/mysql/data" --user=root \
    --auth-root-authentication-method=normal --skip-test-db >"$LAB_DIR/log/mariadb-install.log" 2>&1 \
    || die "mariadb-install-db failed; see $LAB_DIR/log/mariadb-install.log"
  mariadbd --no-defaults --datadir="$LAB_DIR/mysql/data" --user=root --port="$DB_PORT" --bind-address=127.0.0.1 \
    --socket="$DB_SOCK" --pid-file="$LAB_DIR/run/mariadbd.pid" --log-error="$LAB_DIR/log/mariadbd.log" \
    --skip-name-resolve --innodb-lock-wait-timeout=900 >/dev/null 2>&1 &
  wait_for 30 mariadb --no-defaults -S "$DB_SOCK" -u root -e "select 1" || die "mariadbd not answering"
  mariadb --no-defaults -S "$DB_SOCK" -u root -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'lab';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  local host; host=$(hostname -s)
  # slurmdbd reads slurmdbd.conf beside SLURM_CONF, and refuses one that others can read
  (umask 077; cat > "$LAB_DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=${MSOCK}
DbdHost=${host}
DbdAddr=127.0.0.1
DbdPort=${DBD_PORT}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${DB_PORT}
StorageUser=slurm
StoragePass=lab
StorageLoc=slurm_acct_db
PidFile=${LAB_DIR}/run/slurmdbd.pid
LogFile=${LAB_DIR}/log/slurmdbd.log
EOF
  )
  slurmdbd || die "slurmdbd failed; see $LAB_DIR/log/slurmdbd.log"
  wait_for 30 sacctmgr -n list cluster || die "slurmdbd not answering; see $LAB_DIR/log/slurmdbd.log"
  sacctmgr -i add cluster raswarden-lab >/dev/null || die "sacctmgr could not add the cluster"
}

all_idle() { [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -eq "$1" ]; }

# The kernel hands out ports of ip_local_port_range to every outgoing connection and every server bound to port 0;
# a lab port in it can be taken by any test's client at the moment a daemon binds it ("Address already in use").
check_ports() { # PORT...: warn about ports in the ephemeral range
  local range lo hi p; range=$(cat /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || return 0
  read -r lo hi <<< "$range"
  for p in "$@"; do
    if [ "$p" -ge "$lo" ] && [ "$p" -le "$hi" ]; then
      log "warning: port $p is in the ephemeral range $lo-$hi; another program's connection may hold it"
    fi
  done; }

not_idle_logs() { # N: the last lines of the slurmd log of each node not idle
  local i idle; idle=" $(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | tr '\n' ' ') "
  for i in $(seq 1 "$1"); do
    case "$idle" in *" node$i "*) continue;; esac
    log "node$i not idle; the end of $LAB_DIR/log/slurmd-node$i.log:"
    tail -n 5 "$LAB_DIR/log/slurmd-node$i.log" >&2 2>/dev/null || true
  done; }

cmd_up() {
  local n=${1:-4}
  command -v slurmctld >/dev/null || die "Slurm is not installed: run '$0 install' as root"
  cmd_down >/dev/null 2>&1 || true
  local ports=("$CTLD_PORT") i
  for i in $(seq 1 "$n"); do ports+=("$((NODE_PORT_BASE + i))"); done
  if [ "$ACCOUNTING" = 1 ]; then ports+=("$DBD_PORT" "$DB_PORT"); fi
  check_ports "${ports[@]}"
  rm -rf "$LAB_DIR"
  UP_STARTED=1
  mkdir -p "$LAB_DIR"/{etc,state,spool,run,log,jobs,munge,munge-run}
  chmod 700 "$LAB_DIR/munge"; chmod 755 "$LAB_DIR/munge-run" "$LAB_DIR" "$LAB_DIR/jobs"
  head -c 1024 /dev/urandom > "$LAB_DIR/munge/munge.key"; chmod 400 "$LAB_DIR/munge/munge.key"
  munged --force --socket="$MSOCK" --key-file="$LAB_DIR/munge/munge.key" --log-file="$LAB_DIR/munge/munged.log" \
    --pid-file="$LAB_DIR/munge/munged.pid" --seed-file="$LAB_DIR/munge/munged.seed"
  wait_for 10 sh -c "munge -n -S '$MSOCK' | unmunge -S '$MSOCK'" || die "munged not answering"
  write_conf "$n"
  mkdir -p "$LAB_DIR/reboot"
  printf '#!/bin/sh\nLAB_DIR=%s exec %s reboot-self\n' "$LAB_DIR" "$(readlink -f "$0")" > "$LAB_DIR/etc/reboot"
  chmod 755 "$LAB_DIR/etc/reboot"
  if [ "$ACCOUNTING" = 1 ]; then accounting_up; fi
  slurmctld || die "slurmctld failed; see $LAB_DIR/log/slurmctld.log"
  wait_for 15 scontrol ping || die "slurmctld not answering"
  for i in $(seq 1 "$n"); do mkdir -p "$LAB_DIR/spool/node$i"; slurmd -N "node$i" || die "slurmd node$i failed"; done
  wait_for 30 all_idle "$n" || { sinfo >&2; not_idle_logs "$n"; die "nodes not idle after 30 s"; }
  UP_STARTED=0
  log "up: $n nodes idle"
  echo "$CONF"
}

cmd_down() {
  [ -d "$LAB_DIR" ] || return 0
  if [ -s "$LAB_DIR/run/slurmctld.pid" ] && scontrol ping >/dev/null 2>&1; then
    scancel --user="$(id -un)" 2>/dev/null || true
    wait_for 15 sh -c '[ -z "$(squeue -h -t PD,R,CG,S 2>/dev/null)" ]' || true
  fi
  local f p
  for f in "$LAB_DIR"/run/slurmd-*.pid; do [ -e "$f" ] && kill_pidfile "$f" slurmd; done
  for p in /proc/[0-9]*; do  # slurmstepd of this lab: identified by SLURM_CONF in its environment
    [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
    tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$CONF" && kill "${p#/proc/}" 2>/dev/null || true
  done
  kill_pidfile "$LAB_DIR/run/slurmctld.pid" slurmctld
  kill_pidfile "$LAB_DIR/run/slurmdbd.pid" slurmdbd
  kill_pidfile "$LAB_DIR/run/mariadbd.pid" mariadbd
  kill_pidfile "$LAB_DIR/munge/munged.pid" munged
  log "down"
}

slurmd_pid() { # NODE: the PID of NODE's slurmd, if it runs
  local f=$LAB_DIR/run/slurmd-$1.pid pid; [ -s "$f" ] || return 1; pid=$(cat "$f")
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmd ] && alive "$pid" && echo "$pid"; }

cmd_boot() { # NODE: start its slurmd in a time namespace whose boot time is now (Slurm reads the boot time from the
  # uptime slurmd reports); a slurmd already running is left alone
  local node=$1 up
  case "$node" in node[0-9]*) ;; *) die "boot: no such node $node";; esac
  slurmd_pid "$node" >/dev/null && return 0
  up=$(cut -d. -f1 /proc/uptime)
  if unshare --time --boottime "-$up" --fork true 2>/dev/null; then
    unshare --time --boottime "-$up" --fork slurmd -N "$node" || die "slurmd $node failed"
  else  # no time namespaces (kernel < 5.6, or no CAP_SYS_ADMIN): the reboot never completes for Slurm
    log "boot $node: no time namespace here (unshare --time failed): its boot time stays the host's"
    slurmd -N "$node" || die "slurmd $node failed"
  fi
  log "booted $node"; }

cmd_reboot_self() { # slurm.conf's RebootProgram, run by the rebooting node's slurmd: which node is the slurmd above
  local p=$$ node="" pid
  while [ "$p" -gt 1 ]; do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmd ]; then
      node=$(tr '\0' '\n' < "/proc/$p/cmdline" | sed -n '/^-N$/{n;p;}'); break
    fi
    p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || echo 1)
  done
  [ -n "$node" ] || die "reboot-self: not run by a lab slurmd"
  pid=$(slurmd_pid "$node") || die "reboot-self: $node's slurmd is not running"
  log "reboot $node (slurmd $pid)$( [ -e "$LAB_DIR/reboot/$node.hang" ] && echo ': it will not come back')"
  # detached, so slurmd sees its RebootProgram end; a second later the "machine" goes down and comes up
  setsid "$(readlink -f "$0")" reboot-later "$node" "$pid" </dev/null >>"$LAB_DIR/log/reboot.log" 2>&1 & }

cmd_reboot_later() { # NODE PID
  local node=$1 pid=$2
  sleep 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmd ] && kill "$pid" 2>/dev/null
  for _ in $(seq 1 40); do alive "$pid" || break; sleep 0.25; done
  [ -e "$LAB_DIR/reboot/$node.hang" ] || cmd_boot "$node"; }

cmd_status() { sinfo -N -o '%N %T %E' 2>&1 || true; squeue 2>&1 || true; }

case "${1:-}" in
  install) cmd_install ;;
  up) shift; cmd_up "${1:-4}" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  boot) shift; cmd_boot "${1:?boot NODE}" ;;
  reboot-self) cmd_reboot_self >>"$LAB_DIR/log/reboot.log" 2>&1 ;;
  reboot-later) shift; cmd_reboot_later "$@" ;;
  *) sed -n '2,26p' "$0"; exit 2 ;;
esac
