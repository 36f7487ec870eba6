#!/usr/bin/env python3
"""The long SIGKILL campaign of issue 14 (tests/faults/test_kill_campaign.py is its bounded
form): random kills of a disk worker, a network worker or the whole process group (then a
restart) under an idempotent acks=all confluent-kafka stream and a committing consumer group,
every promise checked after each round. Prints one line per round and the counts at the end.

    PYTHONPATH=. .venv/bin/python scripts/kill_campaign.py --kills 200 [--seed 1]
    PYTHONPATH=. .venv/bin/python scripts/kill_campaign.py --cluster --kills 50

--cluster: three brokers and a ZooKeeper of its own, replication factor 3 (the victims and
checks of tests/cluster/kill_campaign.py; its bounded form is tests/cluster/test_kill_campaign.py).

Exit status 1 if any acknowledged record was lost, doubled, reordered or served corrupt, a
committed offset went backwards, the consumer group did not catch up once the kills were over,
or (--cluster) replicas ended different."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.broker_process import stop_on_sigterm  # noqa: E402
from tests.cluster.kill_campaign import ClusterCampaign  # noqa: E402
from tests.cluster.zk import ZooKeeperServer  # noqa: E402
from tests.faults.kill_campaign import Campaign  # noqa: E402


def _print_problems(problems: list[str], shown: int) -> int:
    """Print the problems after the first ``shown``; returns how many are printed now."""
    for p in problems[shown:]:
        print(f"  PROBLEM: {p}", flush=True)
    return len(problems)


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--log-dirs", type=int, default=2)
    ap.add_argument("--workdir", help="keep the broker's files here (default: a temp dir)")
    ap.add_argument("--cluster", action="store_true", help="three brokers and a ZooKeeper")
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="kill-campaign-"))
    work.mkdir(parents=True, exist_ok=True)
    zk = None
    if args.cluster:
        (work / "zk").mkdir(exist_ok=True)
        zk = ZooKeeperServer(work / "zk").start()
        camp: Campaign = ClusterCampaign(work, args.seed, f"{zk.connect}/kill-campaign",
                                         partitions=args.partitions)
    else:
        camp = Campaign(work, args.seed, partitions=args.partitions, log_dirs=args.log_dirs)
    t0 = time.monotonic()
    differing: list[int] = []
    try:
        camp.start()
        shown = 0  # problems printed so far
        for n in range(args.kills):
            victim = camp.round()
            rep = camp.report
            print(f"{time.strftime('%H:%M:%S')} round {n + 1}/{args.kills}: killed {victim}, back "
                  f"in {rep.restart_seconds[-1]:.1f} s; {rep.line()}", flush=True)
            shown = _print_problems(rep.problems, shown)
        camp.check_group_caught_up()
        _print_problems(camp.report.problems, shown)
        if isinstance(camp, ClusterCampaign):
            differing = camp.differing_replicas()
            for p in differing:
                print(f"  PROBLEM: the replicas of partition {p} differ", flush=True)
    finally:
        camp.close()
        if zk is not None:
            zk.kill()
    rep = camp.report
    rs = sorted(rep.restart_seconds) or [0.0]
    print(f"done in {time.monotonic() - t0:.0f} s: {rep.line()}")
    print(f"back to full strength after a kill: median {rs[len(rs) // 2]:.1f} s, max {rs[-1]:.1f} s; "
          f"broker files in {work}")
    return 1 if rep.problems or differing else 0


if __name__ == "__main__":
    sys.exit(main())
