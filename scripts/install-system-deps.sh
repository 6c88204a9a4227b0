#!/usr/bin/env bash
# Debian packages the test suite needs: Prometheus + promtool, Alertmanager,
# node_exporter, Chromium, a Java runtime (Spark) and Slurm with munge (tests/slurm starts a
# single-node cluster). Installed with apt-get when run as root; otherwise
# prints the command to run. Nothing is installed when everything is present.
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v prometheus-node-exporter >/dev/null || need+=(prometheus-node-exporter)
command -v chromium >/dev/null || need+=(chromium)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)  # the Spark engine's test (local[2])
export PATH="$PATH:/usr/sbin:/sbin"
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
[ ${#need[@]} -eq 0 ] && exit 0
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: ${need[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
    # The Debian services must not hold the test ports.
    for svc in prometheus prometheus-alertmanager prometheus-node-exporter slurmctld slurmd munge; do
        (systemctl stop "$svc" || service "$svc" stop) >/dev/null 2>&1 || true
    done
else
    echo "gpulens tests need these Debian packages: ${need[*]}"
    echo "install them with: sudo apt-get install ${need[*]}"
    [ "${CI:-}" = "true" ] && exit 1
fi
exit 0
