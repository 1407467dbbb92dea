#!/usr/bin/env bash
# Install what tests/slurm/start-cluster.sh needs, if it is missing (needs root and the Debian archive):
# SLURM (slurm-wlm), MUNGE, and for job accounting (sacct, which submitit reads job states from) slurmdbd and
# mariadb-server. With MEMTUI_SLURM_ACCOUNTING=0 only slurm-wlm and munge.
# Idempotent: does nothing when the programs are already there. Takes about 30 s on a fresh Debian 12.
set -euo pipefail

packages="slurm-wlm munge"
commands="sbatch slurmctld slurmd munged"
if [ "${MEMTUI_SLURM_ACCOUNTING:-1}" = 1 ]; then
    packages="$packages slurmdbd mariadb-server"
    commands="$commands slurmdbd sacct mariadbd mariadb-install-db"
fi
need=0
for cmd in $commands; do
    command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || need=1
done
if [ "$need" = 0 ]; then
    echo "install.sh: already installed: $packages"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install.sh: not root; install the packages with: apt-get install $packages" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $packages
# shellcheck disable=SC2086
echo "install.sh: installed $(dpkg-query -W -f='${Package} ${Version}, ' $packages | sed 's/, $//')"
