#!/usr/bin/env bash
# Installs everything the broker and its tests need, idempotently: Debian packages (kcat,
# zookeeper, xfsprogs, ...), a virtualenv in .venv with the project (its C extension built in
# place) and its test dependencies, and warm numba caches.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v kcat >/dev/null 2>&1 || need_apt+=(kcat)
# the fault tests: xfs_io (ext4 shutdown = a dead disk), mkfs.ext4 and losetup (loop images)
command -v xfs_io >/dev/null 2>&1 || need_apt+=(xfsprogs)
command -v mkfs.ext4 >/dev/null 2>&1 || need_apt+=(e2fsprogs)
command -v losetup >/dev/null 2>&1 || need_apt+=(mount)
# tests/broker/test_clients.py counts an index file's cached pages with fincore
command -v fincore >/dev/null 2>&1 || need_apt+=(util-linux)
# the Spark tests run a real standalone cluster (pyspark 4 needs Java 17+)
command -v java >/dev/null 2>&1 || need_apt+=(default-jre-headless)
# tests/ops: the unit checks, socket buffer checks, the --watch terminal
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v ss >/dev/null 2>&1 || need_apt+=(iproute2)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
# tests/network: faults between test hosts (network namespaces) are nftables rules
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
# perf/count_metrics_instructions.py counts instructions with callgrind
command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
# cluster tests and the quick start start a real ZooKeeper server from Debian's package
[ -f /usr/share/java/zookeeper.jar ] || need_apt+=(zookeeper)
# the client's C extension (native/record_run.c, built by pip install): a compiler and Python.h
PY=${PYTHON:-python3}
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc)
"$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.setup-stamp
# again when the build inputs change, or the C extension is missing (a clean checkout's tree)
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
   || [ native/record_run.c -nt "$stamp" ] || ! ls native/record_run.*.so >/dev/null 2>&1; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch "$stamp"
fi
# compile the numba kernels once, so the first broker start and the first test don't pay for it
.venv/bin/python -c "import native.warmup as w; w.warmup()" 2>/dev/null || true
