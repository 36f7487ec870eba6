#!/usr/bin/env bash
# Install the peer systems the comparison runner starts (Debian packages) and the Python clients
# it drives them with (the project's optional `perf` group). Idempotent; needs root or sudo.
#
#   bash perf/setup_peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v rabbitmq-server >/dev/null && [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need+=(rabbitmq-server)
command -v nats-server >/dev/null || need+=(nats-server)
command -v kcat >/dev/null || need+=(kcat)
if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    # The packages start system-wide services; the runner starts its own private instances, so
    # stop the packaged ones (they would hold 6379/5672/4222 and eat CPU during measurements).
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
for svc in redis-server rabbitmq-server nats-server; do
    $SUDO systemctl stop "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
    $SUDO systemctl disable "$svc" >/dev/null 2>&1 || true
done

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[perf]'
echo "peers ready: $(redis-server --version | cut -d' ' -f3), rabbitmq $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null), $(nats-server --version)"
