"""Failed SASL logins in a flood, and what they cost everyone else (issue 44: 10,000 failed logins
in a row from one client must not slow the others; their p99 stays under 50 ms).

One broker with a SASL_PLAINTEXT listener (PLAIN users from its JAAS line). A flooding process
opens a connection, sends SaslHandshake and a SaslAuthenticate with a wrong password, reads the
SASL_AUTHENTICATION_FAILED answer, and goes again, ``--logins`` times. Meanwhile a good client,
logged in once, sends a Metadata request every 10 ms on its own connection and records each
round trip. The same good client runs alone first, for the baseline.

    .venv/bin/python perf/bench_login_flood.py                   # 10,000 failed logins
    .venv/bin/python perf/bench_login_flood.py --logins 2000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.broker.wire import RawConnection  # noqa: E402
from tests.broker_process import BrokerProcess, free_port  # noqa: E402

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_good="good-pw" user_alice="alice-pw";')
TARGET_P99_MS = 50.0


def flood(port: int, logins: int, out: multiprocessing.Queue) -> None:
    failed = 0
    t0 = time.perf_counter()
    for i in range(logins):
        with RawConnection(port) as c:
            c.request(17, 1, {"mechanism": "PLAIN"})
            if c.request(36, 1, {"auth_bytes": b"\0alice\0wrong-%d" % i}).error_code == 58:
                failed += 1
    out.put((failed, time.perf_counter() - t0))


def good_client(port: int, seconds: float) -> list[float]:
    """Round trips (ms) of Metadata requests every 10 ms on one logged-in connection."""
    out = []
    with RawConnection(port) as c:
        c.request(17, 1, {"mechanism": "PLAIN"})
        assert c.request(36, 1, {"auth_bytes": b"\0good\0good-pw"}).error_code == 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            c.request(3, 1, {"topics": []})
            out.append((time.perf_counter() - t) * 1000)
            time.sleep(0.01)
    return out


def p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logins", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain, sasl = free_port(), free_port()
        with BrokerProcess(Path(tmp), port=plain, overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}):
            alone = good_client(sasl, 5.0)
            q: multiprocessing.Queue = multiprocessing.Queue()
            proc = multiprocessing.Process(target=flood, args=(sasl, args.logins, q))
            proc.start()
            during: list[float] = []
            while proc.is_alive():
                during += good_client(sasl, 2.0)
            failed, seconds = q.get()
            proc.join()
    print(f"failed logins: {failed} of {args.logins} in {seconds:.1f} s ({failed / seconds:,.0f}/s), "
          f"load {os.getloadavg()[0]:.1f}")
    for name, rtt in (("alone", alone), ("during the flood", during)):
        print(f"good client {name}: {len(rtt)} requests, p50 {statistics.median(rtt):.2f} ms, "
              f"p99 {p(rtt, 0.99):.2f} ms, max {max(rtt):.2f} ms")
    worst = p(during, 0.99)
    print(f"p99 during the flood {worst:.2f} ms: target < {TARGET_P99_MS} ms "
          f"{'met' if worst < TARGET_P99_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
