"""What ACL checks cost a producer (issue 44's target: at most 3 % of produce throughput).

Two brokers on this machine, the same but for ``authorizer.class.name``: each has a
SASL_PLAINTEXT listener with a PLAIN user ``bench``; on the one with the authorizer, 1,000 ACLs
name 1,000 topics (one each, as a cluster of many tenants would hold) plus the one that lets
``bench`` write the benchmark topic. confluent-kafka produces ``--records`` 100-byte records
(bench_broker's producer: produce_batch, acks=1) to a 6-partition topic through each broker in
turn, the order alternating per run; the rates' medians and the ratio (with / without ACLs) are
printed.

    .venv/bin/python perf/bench_acl.py                 # 3 runs of 3,000,000 records
    .venv/bin/python perf/bench_acl.py --records 500000 --runs 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from perf.bench_broker import create_topic, produce  # noqa: E402
from tests.broker_process import BrokerProcess, free_port  # noqa: E402

TOPIC = "bench-acl"
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-pw";'
TARGET = 0.97  # with ACLs / without: at most 3 % slower


def start(workdir: Path, acls: bool) -> tuple[BrokerProcess, int]:
    plain, sasl = free_port(), free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}
    if acls:
        overrides.update({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                          "super.users": "User:ANONYMOUS"})
    workdir.mkdir(parents=True, exist_ok=True)
    b = BrokerProcess(workdir, port=plain, overrides=overrides).start()
    create_topic(b.bootstrap, 6, TOPIC)
    if acls:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        lit = ResourcePatternType.LITERAL
        bindings = [AclBinding(ResourceType.TOPIC, f"tenant-{i:04d}", lit, f"User:tenant{i}", "*",
                               AclOperation.WRITE, AclPermissionType.ALLOW) for i in range(1000)]
        bindings.append(AclBinding(ResourceType.TOPIC, TOPIC, lit, "User:bench", "*",
                                   AclOperation.WRITE, AclPermissionType.ALLOW))
        for f in admin.create_acls(bindings).values():
            f.result(60)
        time.sleep(0.5)  # every network worker re-reads the ACLs within 0.2 s
    return b, sasl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="parent of the brokers' directories")
    args = ap.parse_args()
    rates: dict[bool, list[float]] = {False: [], True: []}
    cpu_us: dict[bool, list[float]] = {False: [], True: []}  # broker CPU per record
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        brokers = {on: start(Path(tmp) / ("acls" if on else "open"), on) for on in (False, True)}
        try:
            for run in range(args.runs):
                for on in ((False, True) if run % 2 == 0 else (True, False)):
                    b, sasl = brokers[on]
                    conf = {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-pw"}
                    ph = produce(b, args.records, 100, topic=TOPIC, client_conf=conf)
                    rate = args.records / ph.elapsed
                    rates[on].append(rate)
                    cpu_us[on].append(ph.cpu["total"] / args.records * 1e6)
                    print(f"run {run + 1} {'with' if on else 'without'} ACLs: {rate:,.0f} records/s, "
                          f"broker CPU {cpu_us[on][-1]:.2f} us/record (load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            for b, _ in brokers.values():
                b.stop()
    without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
    ratio = with_ / without
    print(f"median without ACLs {without:,.0f} records/s (runs {', '.join(f'{r:,.0f}' for r in rates[False])})")
    print(f"median with 1,001 ACLs {with_:,.0f} records/s (runs {', '.join(f'{r:,.0f}' for r in rates[True])})")
    print(f"broker CPU per record: without {statistics.median(cpu_us[False]):.2f} us, "
          f"with {statistics.median(cpu_us[True]):.2f} us")
    print(f"ratio {ratio:.3f}: target >= {TARGET} {'met' if ratio >= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
