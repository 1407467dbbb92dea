#!/usr/bin/env bash
# Stop the cluster that tests/slurm/start-cluster.sh started (found through the pid files in its state folder).
#   stop-cluster.sh                 cancel its jobs; stop slurmd, slurmctld, slurmdbd and MariaDB, stop munged if
#                                   start-cluster.sh started it, and put back the /etc/slurm/slurm.conf it replaced
#                                   (or remove the one it wrote)
#   stop-cluster.sh --daemons-only  only cancel its jobs and stop slurmd, slurmctld, slurmdbd and MariaDB (what
#                                   start-cluster.sh does before starting)
# Same environment as start-cluster.sh (MEMTUI_SLURM_DIR). Safe to run when nothing is running.
set -euo pipefail

STATE="${MEMTUI_SLURM_DIR:-/tmp/memtui-slurm}"
MARKER="# Written by memtui tests/slurm/start-cluster.sh"
export PATH="$PATH:/usr/sbin:/sbin"
daemons_only=0
[ "${1:-}" = --daemons-only ] && daemons_only=1

# stop NAME=PIDFILE...: SIGTERM each process named in a PIDFILE if it is alive and its command line names NAME (a
# pid file left from a reboot may name someone else's process), all at once; wait up to 15 s, then SIGKILL.
stop() {
    local arg name pidfile pid cmdline pids=()
    for arg in "$@"; do
        name="${arg%%=*}" pidfile="${arg#*=}"
        [ -f "$pidfile" ] || continue
        pid="$(tr -dc 0-9 < "$pidfile")"
        cmdline="$( { [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null || true)"
        if [[ "$cmdline" == *"$name"* ]]; then
            echo "stop-cluster: stopping $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$pidfile"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "stop-cluster: pid $pid ignored SIGTERM for 15s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}

if [ -f "$STATE/slurm.conf" ] && [ -f "$STATE/run/slurmctld.pid" ]; then
    # Cancel this cluster's jobs so that no job outlives its daemons (a restart forgets them).
    if SLURM_CONF="$STATE/slurm.conf" timeout 10 scancel --partition=debug >/dev/null 2>&1; then
        for _ in $(seq 1 40); do
            [ -z "$(SLURM_CONF="$STATE/slurm.conf" timeout 5 squeue -h -o %i 2>/dev/null || true)" ] && break
            sleep 0.25
        done
    fi
fi
# slurmctld sends its last job records to slurmdbd as it stops: stop the accounting daemons after it.
stop slurmd="$STATE/run/slurmd.pid" slurmctld="$STATE/run/slurmctld.pid"
stop slurmdbd="$STATE/run/slurmdbd.pid" mariadbd="$STATE/run/mysqld.pid"
[ "$daemons_only" = 1 ] && exit 0

if [ -f "$STATE/run/munged-started" ]; then
    stop munged=/run/munge/munged.pid
    rm -f "$STATE/run/munged-started"
fi
# Only the copy of this state folder's configuration (another state folder's cluster may own /etc/slurm/slurm.conf).
if [ -f /etc/slurm/slurm.conf ] && grep -qxF "$MARKER" /etc/slurm/slurm.conf \
    && cmp -s /etc/slurm/slurm.conf "$STATE/slurm.conf"; then
    if [ -f /etc/slurm/slurm.conf.memtui-backup ]; then
        echo "stop-cluster: restoring /etc/slurm/slurm.conf from /etc/slurm/slurm.conf.memtui-backup"
        mv /etc/slurm/slurm.conf.memtui-backup /etc/slurm/slurm.conf
    else
        rm -f /etc/slurm/slurm.conf
    fi
fi
echo "stop-cluster: stopped"
