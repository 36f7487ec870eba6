"""What the cluster's metadata cache in shared memory costs (shm/metadata_cache.py): the cluster
worker rewrites it whole after every UpdateMetadata, a network or disk worker decodes it once
per change and then answers lookups from its decoded copy.

Usage: .venv/bin/python perf/bench_metadata_cache.py [--runs 5] [--lookups 100000]

Prints, per cluster size, the median over --runs of: publish (encode and write, the cluster
worker's cost per UpdateMetadata), first read (a reader's copy and decode after a change) and a
cached lookup (``ClusterView.has_partition`` when nothing changed: the seqlock word's read and
two dict lookups).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import posix_ipc  # noqa: E402

from appliance.broker.cluster_view import ClusterView  # noqa: E402
from appliance.shm.metadata_cache import MetadataCache  # noqa: E402

SIZES = ((50, 50), (100, 100), (1000, 32))  # topics x partitions each


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--lookups", type=int, default=100_000)
    args = ap.parse_args()
    name = f"/bench-metadata-{uuid.uuid4().hex[:8]}"
    writer = MetadataCache.create(name)
    reader = MetadataCache.attach(name)
    view = ClusterView(None, reader)
    try:
        print(f"{'partitions':>10} {'publish ms':>11} {'first read ms':>14} {'cached lookup ns':>17}")
        for n_topics, per in SIZES:
            topics = {f"topic-{i:05d}": {p: (p % 3, 5) for p in range(per)} for i in range(n_topics)}
            pub, first, cached = [], [], []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                writer.publish(topics)
                t1 = time.perf_counter()
                reader.topics()
                t2 = time.perf_counter()
                for _ in range(args.lookups):
                    view.has_partition("topic-00007", 3)
                t3 = time.perf_counter()
                pub.append((t1 - t0) * 1e3)
                first.append((t2 - t1) * 1e3)
                cached.append((t3 - t2) / args.lookups * 1e9)
            print(f"{n_topics * per:>10} {statistics.median(pub):>11.2f} {statistics.median(first):>14.2f} "
                  f"{statistics.median(cached):>17.0f}")
    finally:
        reader.close()
        writer.close()
        posix_ipc.unlink_shared_memory(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
