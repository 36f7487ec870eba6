"""Stress for `tests/cluster/zk.py`'s restart (not collected by pytest: run it by hand, best with
the machine loaded, e.g. two `python3 -c 'while 1: pass'`).

Usage: .venv/bin/python -m tests.cluster.stress_zk_restart [--rounds 25] [--clients 3]

ZooKeeper is SIGKILLed and started again --rounds times, 2 s apart, while --clients kazoo clients
hold 60 s sessions (what test_zk_outage.py does once). A round passes when every client is
connected again, on its own session, within 20 s. Each line also counts the connections
ZooKeeper stranded so far (ZOOKEEPER-5051, the reason `ZooKeeperServer.start` may start the
server again): before that fix, two runs of 25 rounds with two busy loops (load 6-7) failed at
their 2nd and 3rd round, a client waiting out its 60 s handshake on a stranded connection.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from appliance.cluster.zk_session import ZkSettings, open_session
from tests.cluster.zk import STRANDED_CONNECTION, ZooKeeperServer


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--clients", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)  # kazoo's reconnect warnings, one per attempt
    zk = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="stress-zk-"))).start()
    clients = [open_session(ZkSettings(zk.connect + "/stress", 60000)) for _ in range(args.clients)]
    failed = 0
    try:
        for r in range(args.rounds):
            sessions = [c.client_id[0] for c in clients]
            zk.kill()
            time.sleep(2)
            t0 = time.monotonic()
            zk.start()
            started = time.monotonic() - t0
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not all(c.connected for c in clients):
                time.sleep(0.05)
            ok = all(c.connected for c in clients) and [c.client_id[0] for c in clients] == sessions
            stranded = zk.log_path.read_bytes().count(STRANDED_CONNECTION)
            print(f"round {r}: started in {started:.1f} s, stranded so far {stranded}, "
                  f"every session back: {ok}", flush=True)
            if not ok:
                failed += 1
                break
    finally:
        for c in clients:
            c.stop()
            c.close()
        zk.kill()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
