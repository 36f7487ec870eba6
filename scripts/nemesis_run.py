#!/usr/bin/env python3
"""A seeded, bounded run of random nemeses on a cluster across test hosts (network namespaces;
tests/network/cluster.py): three brokers, a ZooKeeper ensemble of three, RF 3 with
min.insync.replicas 2, an idempotent acks=all producer streaming and a group committing
offsets from a client host. Each
round applies one fault for a random while — a network fault (an isolated leader, follower or
controller, a one-way cut, loss between brokers, a ZooKeeper host cut off, a broker with a
ZooKeeper minority, a leader cut from the cluster but not the client), a SIGKILL or a SIGSTOP
of a broker, or a ZooKeeper server killed — heals it, and checks every promise (every broker
back in every ISR within 30 s, every acknowledged record once at its offset, no offset
acknowledged twice, replicas byte-identical, no acknowledged group offset commit lost or
rewound). Not part of the test suite.

    PYTHONPATH=. .venv/bin/python scripts/nemesis_run.py --minutes 30 [--seed 1]

Needs root (network namespaces, nftables). Prints one line per round and a report at the end;
exit status 1 when a promise was broken."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, ROOT)
# the brokers, the producer and the relays run this checkout too (a relative PYTHONPATH such as
# `.` would mean each broker's own directory, and the installed package would run instead)
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])

from tests.broker_process import stop_on_sigterm  # noqa: E402
from tests.network.cluster import NEMESES, NetCluster  # noqa: E402
from tests.network.hosts import netns_unavailable_reason  # noqa: E402


def main() -> int:
    stop_on_sigterm()
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # the harness's session reconnecting
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="stop starting rounds after this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hold", type=float, nargs=2, default=(3.0, 15.0), metavar=("MIN", "MAX"),
                    help="seconds each fault lasts, drawn uniformly")
    ap.add_argument("--nemeses", default=",".join(NEMESES), help=f"comma-separated, of {', '.join(NEMESES)}")
    ap.add_argument("--workdir", help="keep the brokers' and ZooKeeper's files here (default: a temp dir)")
    args = ap.parse_args()
    reason = netns_unavailable_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    names = args.nemeses.split(",")
    unknown = [n for n in names if n not in NEMESES]
    if unknown:
        ap.error(f"unknown nemeses {unknown}")

    work = Path(args.workdir or tempfile.mkdtemp(prefix="nemesis-run-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"seed {args.seed}, {args.minutes} minutes, files in {work}", flush=True)
    t0 = time.monotonic()
    cluster = NetCluster(work, seed=args.seed, log=lambda line: print(line, flush=True))
    shown = 0
    try:
        cluster.start()
        print(f"cluster up in {time.monotonic() - t0:.1f} s: {cluster.isr_view()}", flush=True)
        end = time.monotonic() + args.minutes * 60
        rnd = 0
        while time.monotonic() < end:
            rnd += 1
            name = cluster.rng.choice(names)
            hold = cluster.rng.uniform(*args.hold)
            started = time.monotonic()
            cluster.round(name, hold=hold)
            rep = cluster.report
            print(f"round {rnd}: {name} for {hold:.1f} s, back in {rep.recover_s[-1]:.1f} s "
                  f"(round {time.monotonic() - started:.0f} s); acknowledged {rep.acked}, "
                  f"lost {rep.lost}, duplicates {rep.duplicates}; commits {rep.commits}", flush=True)
            for p in rep.problems[shown:]:
                print(f"  PROBLEM: {p}", flush=True)
            shown = len(rep.problems)
    finally:
        cluster.close()
    rep = cluster.report
    print(f"\n{rep.summary()}")
    print(f"rounds: {sum(rep.faults.values())} in {(time.monotonic() - t0) / 60:.1f} minutes")
    for p in rep.problems:
        print(f"  PROBLEM: {p}")
    return 1 if rep.problems else 0


if __name__ == "__main__":
    sys.exit(main())
