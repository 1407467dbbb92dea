#!/usr/bin/env bash
# Start a single-node SLURM cluster on this machine, for the --slurm tests (see tests/slurm/README.md).
#
# Needs root and Debian's slurm-wlm and munge packages, and for accounting slurmdbd and mariadb-server
# (tests/slurm/install.sh installs them). Takes about 10 s.
# One node, named after `hostname -s`, with all of its CPUs, in one partition, `debug` (the default).
#
# Where the configuration goes: every SLURM client (sbatch, squeue, scancel, sacct, sinfo: also those that
# submitit runs from inside pytest) reads /etc/slurm/slurm.conf unless SLURM_CONF says otherwise. So that no
# process needs a special environment, the configuration is written to $MEMTUI_SLURM_DIR/slurm.conf and copied to
# /etc/slurm/slurm.conf. A slurm.conf there that this script did not write is moved aside once, to
# /etc/slurm/slurm.conf.memtui-backup, and stop-cluster.sh puts it back. Set MEMTUI_SLURM_ETC=0 to leave /etc/slurm
# alone: then clients need `export SLURM_CONF=$MEMTUI_SLURM_DIR/slurm.conf` (also written to $MEMTUI_SLURM_DIR/env).
#
# Environment:
#   MEMTUI_SLURM_DIR       state folder (config, logs, pid files, spool, state), default /tmp/memtui-slurm
#   MEMTUI_SLURM_ETC       1 (default): install the config as /etc/slurm/slurm.conf; 0: only in the state folder
#   MEMTUI_SLURM_TIMEOUT   seconds to wait for the node to be idle and for a test job to run (default 60 each)
#   MEMTUI_SLURM_ACCOUNTING  1 (default): job accounting through slurmdbd and a private MariaDB server (data in the
#                          state folder, listening on 127.0.0.1:$MEMTUI_SLURM_DB_PORT, default 6833) so that `sacct`
#                          works. submitit learns job states only from sacct: without it, a job that ends without
#                          writing its result (scancel, time limit, out of memory) is never seen as finished and
#                          job.result() waits forever. 0: no accounting (sacct fails; submitit warns).
#
# Idempotent: daemons from an earlier run (found through the pid files in the state folder) are stopped first and
# slurmctld starts with a clean state, so any earlier jobs are gone. munged is left running if it already works.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${MEMTUI_SLURM_DIR:-/tmp/memtui-slurm}"
ETC="${MEMTUI_SLURM_ETC:-1}"
TIMEOUT="${MEMTUI_SLURM_TIMEOUT:-60}"
ACCOUNTING="${MEMTUI_SLURM_ACCOUNTING:-1}"
DB_PORT="${MEMTUI_SLURM_DB_PORT:-6833}"
MARKER="# Written by memtui tests/slurm/start-cluster.sh"
export PATH="$PATH:/usr/sbin:/sbin"

log() { echo "start-cluster: $*"; }
die() {
    echo "start-cluster: ERROR: $*" >&2
    for f in "$STATE"/log/slurmctld.log "$STATE"/log/slurmd.log "$STATE"/log/slurmdbd.log "$STATE"/log/mariadb.log \
        /var/log/munge/munged.log; do
        if [ -f "$f" ]; then
            echo "----- last lines of $f -----" >&2
            tail -n 40 "$f" >&2 || true
        fi
    done
    exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root (slurmd runs jobs as their submitting user and needs root)"
for cmd in munged munge unmunge slurmctld slurmd sbatch sinfo scontrol; do
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd not found; run tests/slurm/install.sh first"
done
if [ "$ACCOUNTING" = 1 ]; then
    for cmd in slurmdbd sacct sacctmgr mariadbd mariadb-install-db mariadb; do
        command -v "$cmd" >/dev/null 2>&1 \
            || die "$cmd not found; run tests/slurm/install.sh first (or set MEMTUI_SLURM_ACCOUNTING=0)"
    done
fi
id munge >/dev/null 2>&1 || die "no munge user; is Debian's munge package installed?"
T0=$(date +%s)

# --- stop what an earlier run left running --------------------------------------------------------------------
"$here/stop-cluster.sh" --daemons-only
# Anything else listening on our ports (a cluster started from another state folder, a system slurmctld) would
# answer our clients in place of the daemons started below, which would fail to start.
ports="6817 6818"
[ "$ACCOUNTING" = 1 ] && ports="$ports 6819 $DB_PORT"
for port in $ports; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        die "port $port on 127.0.0.1 is in use (a SLURM not started from $STATE? stop it first)"
    fi
done

mkdir -p "$STATE"/log "$STATE"/state "$STATE"/spool "$STATE"/run
chmod 0755 "$STATE" "$STATE"/log "$STATE"/spool "$STATE"/run
chmod 0700 "$STATE"/state
rm -rf "${STATE:?}"/state/* "${STATE:?}"/spool/* "${STATE:?}"/mysql
mkdir -p "$STATE"/spool/slurmd

# --- munge ------------------------------------------------------------------------------------------------------
# Debian's layout: key and folders owned by munge, the socket folder /run/munge world-readable (clients connect to
# the socket in it), the others private.
install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null 2>&1; then
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if munge_works; then
    log "munged already running"
else
    log "starting munged"
    # A stale socket lock from a munged that is gone makes a new one refuse to start.
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    runuser -u munge -- munged || die "munged did not start"
    touch "$STATE/run/munged-started"  # stop-cluster.sh stops munged only if this script started it
    for _ in $(seq 1 50); do munge_works && break; sleep 0.1; done
    munge_works || die "munge -n | unmunge fails after starting munged"
fi

# --- configuration ----------------------------------------------------------------------------------------------
NODE="$(hostname -s)"
CPUS="$(nproc)"
# RealMemory must not exceed what slurmd finds, or the node is drained: 80% of the memory available now, in MiB.
MEM_AVAIL_KB="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
REALMEM=$(( MEM_AVAIL_KB * 8 / 10 / 1024 ))
[ "$REALMEM" -ge 256 ] || REALMEM=256

CONF="$STATE/slurm.conf"
cat > "$CONF" <<EOF
$MARKER
# State folder: $STATE. Stop with tests/slurm/stop-cluster.sh.
ClusterName=memtui
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(if [ "$ACCOUNTING" = 1 ]; then
    echo "AccountingStorageType=accounting_storage/slurmdbd"
    echo "AccountingStorageHost=127.0.0.1"
else
    echo "AccountingStorageType=accounting_storage/none"
fi)
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Trust the node line below over what slurmd detects (containers often report more than they let us use).
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
MailProg=/bin/true
# Short waits so that cancelled jobs end quickly.
KillWait=5
InactiveLimit=0
MinJobAge=300
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool/slurmd
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REALMEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
chmod 0644 "$CONF"

ACTIVE_CONF="$CONF"
if [ "$ETC" = 1 ]; then
    mkdir -p /etc/slurm
    if [ -e /etc/slurm/slurm.conf ] && ! grep -qxF "$MARKER" /etc/slurm/slurm.conf; then
        if [ -e /etc/slurm/slurm.conf.memtui-backup ]; then
            die "/etc/slurm/slurm.conf was not written by this script and a backup already exists; move one away"
        fi
        log "moving the existing /etc/slurm/slurm.conf to /etc/slurm/slurm.conf.memtui-backup"
        mv /etc/slurm/slurm.conf /etc/slurm/slurm.conf.memtui-backup
    fi
    install -m 0644 "$CONF" /etc/slurm/slurm.conf
    ACTIVE_CONF=/etc/slurm/slurm.conf
fi
export SLURM_CONF="$ACTIVE_CONF"
echo "export SLURM_CONF=$ACTIVE_CONF" > "$STATE/env"
log "configuration $ACTIVE_CONF: node $NODE, $CPUS CPUs, RealMemory=$REALMEM MiB, partition debug"

# --- accounting: MariaDB and slurmdbd (both private to this cluster, fresh at each start) -----------------------
if [ "$ACCOUNTING" = 1 ]; then
    DB_PASS="memtui-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
    log "starting MariaDB (127.0.0.1:$DB_PORT) and slurmdbd"
    mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
        --skip-test-db > "$STATE/log/mariadb-install.log" 2>&1 \
        || { cat "$STATE/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    : > "$STATE/log/mariadb.log"
    setsid mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --socket="$STATE/run/mysqld.sock" \
        --pid-file="$STATE/run/mysqld.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
        --log-error="$STATE/log/mariadb.log" --skip-log-bin --innodb-buffer-pool-size=64M \
        --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
    sql() { mariadb --no-defaults --socket="$STATE/run/mysqld.sock" -u root "$@"; }
    for _ in $(seq 1 $(( TIMEOUT * 5 ))); do sql -e "select 1" >/dev/null 2>&1 && break; sleep 0.2; done
    sql -e "select 1" >/dev/null 2>&1 || die "MariaDB did not start"
    sql -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
        || die "could not create the database user"
    # slurmdbd reads slurmdbd.conf from the folder of SLURM_CONF, so it gets the state folder's copy.
    cat > "$STATE/slurmdbd.conf" <<EOF
$MARKER
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=$NODE
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
DebugLevel=info
EOF
    chmod 0600 "$STATE/slurmdbd.conf"
    : > "$STATE/log/slurmdbd.log"
    SLURM_CONF="$CONF" slurmdbd || die "slurmdbd did not start"
    for _ in $(seq 1 $(( TIMEOUT * 4 ))); do
        sacctmgr -n -P list cluster >/dev/null 2>&1 && break
        sleep 0.25
    done
    sacctmgr -n -P list cluster >/dev/null 2>&1 || die "slurmdbd does not answer (sacctmgr list cluster)"
fi

# --- daemons ----------------------------------------------------------------------------------------------------
: > "$STATE/log/slurmctld.log"
: > "$STATE/log/slurmd.log"
log "starting slurmctld and slurmd"
slurmctld -c -f "$ACTIVE_CONF" || die "slurmctld did not start"
slurmd -c -f "$ACTIVE_CONF" -N "$NODE" || die "slurmd did not start"

deadline=$(( $(date +%s) + TIMEOUT ))
state=""
while :; do
    state="$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1 || true)"
    [ "$state" = idle ] && break
    [ "$(date +%s)" -lt "$deadline" ] || die "node $NODE is not idle after ${TIMEOUT}s (sinfo: '${state:-no answer}')"
    sleep 0.5
done
log "node $NODE idle after $(( $(date +%s) - T0 ))s"

# --- a test job, as a job array, through sbatch like submitit does --------------------------------------------
out="$STATE/smoke"
rm -rf "$out"
mkdir -p "$out"
# shellcheck disable=SC2016  # $SLURM_ARRAY_TASK_ID is for the job to expand
jobid="$(sbatch --parsable -p debug -N1 -n1 -t 2 --array=0-1 -o "$out/%A_%a.out" -D "$out" \
    --wrap 'echo "task $SLURM_ARRAY_TASK_ID on $(hostname)"')" || die "sbatch failed"
jobid="${jobid%%;*}"
tasks_done() { grep -qs "^task 0 on " "$out/${jobid}_0.out" && grep -qs "^task 1 on " "$out/${jobid}_1.out"; }
deadline=$(( $(date +%s) + TIMEOUT ))
until tasks_done; do
    [ "$(date +%s)" -lt "$deadline" ] || { squeue >&2 || true; die "test job array $jobid did not run in ${TIMEOUT}s"; }
    sleep 0.5
done
if [ "$ACCOUNTING" = 1 ]; then
    # slurmctld sends job records to slurmdbd asynchronously: wait until sacct knows both tasks as COMPLETED.
    deadline=$(( $(date +%s) + TIMEOUT ))
    until [ "$(sacct -n -X -P -j "$jobid" -o State 2>/dev/null | grep -c '^COMPLETED$' || true)" = 2 ]; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            sacct -j "$jobid" >&2 || true
            die "sacct does not report the test job array as COMPLETED after ${TIMEOUT}s"
        fi
        sleep 0.5
    done
    log "sacct reports the test job array COMPLETED"
fi
# A daemon that died after starting (its pid file is gone or names no process) means something else answered.
daemons="slurmctld slurmd"
[ "$ACCOUNTING" = 1 ] && daemons="$daemons slurmdbd mysqld"
for daemon in $daemons; do
    pid="$(cat "$STATE/run/$daemon.pid" 2>/dev/null || true)"
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        die "$daemon is not running (see its log)"
    fi
done
log "test job array $jobid ran; cluster up after $(( $(date +%s) - T0 ))s"
