"""CPU seconds of an in-place Spark read, split by process, and of the source alone.

On the shared 2-core machine the wall time of a 2 M-record Spark job swings 1-5 s with the
other sessions' load; the CPU time each process spends on it hardly moves, so before/after
comparisons of the read path are made on it. Data: bench_spark_cluster's topic (2 partitions of
100-byte values, uncompressed batches of 1000) written into a log dir; no broker.

Measured (medians of ``--runs`` after two warm-up runs):

- source alone: :func:`spark.arrow_reader.read_range` over every partition in this process:
  CPU seconds (user + sys), sys alone, minor page faults;
- Spark: ``count(*)`` and ``sum(length(value))`` over ``format("appliance")`` in a local[2]
  session: wall seconds, CPU seconds of the JVM and of its Python workers, for the whole topic
  and for an empty read (``startingOffsets=latest``: the per-query cost: planning, scheduling,
  code generation), so the per-record share is the difference;
- the same two over the null source (:mod:`perf.spark_null_source`: the same schema, Arrow
  batches of the in-place reader's size, no work of its own): Spark's own cost per record,
  so the in-place figure minus this one is what is ours;
- both sources into Spark's ``noop`` sink (every row of every column, one stage).

``--code DIR`` measures the spark/ and native/ of another checkout (the same data and the same
measurement: for paired before/after runs).

Usage: ``.venv/bin/python perf/bench_spark_cpu.py [--records 2000000] [--runs 5] [--code DIR]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _source_alone(log_dir: str, partitions: int, expect: int) -> tuple[float, float, int]:
    from spark.arrow_reader import read_range

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    rows = 0
    for p in range(partitions):
        for rb in read_range(os.path.join(log_dir, f"bench-{p}"), "bench", p, 0, 1 << 62):
            rows += rb.num_rows
            del rb  # as Spark's worker does: nothing keeps a batch once it is sent
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    assert rows == expect, rows
    return ((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt)


#: the query cells: (label, format, query, whole topic?). ``agg`` is bench_spark_cluster's
#: count(*) + sum(length(value)); ``noop`` reads every row of every column into Spark's noop
#: sink (one stage, no aggregate). The null source (:mod:`perf.spark_null_source`) yields
#: pre-built batches of the same schema and size: what Spark alone costs for those rows.
CELLS = (("all", "appliance", "agg", True), ("empty", "appliance", "agg", False),
         ("null", "appliance_null", "agg", True), ("null empty", "appliance_null", "agg", False),
         ("noop", "appliance", "noop", True), ("null noop", "appliance_null", "noop", True))


def _batches(log_dir: str, partitions: int) -> int:
    """Arrow batches the in-place reader makes of the topic (the null source makes as many)."""
    from spark.arrow_reader import read_range

    return sum(1 for p in range(partitions)
               for _ in read_range(os.path.join(log_dir, f"bench-{p}"), "bench", p, 0, 1 << 62))


def _spark_runs(log_dir: str, expect: int, runs: int,
                batch_rows: int) -> dict[str, list[tuple[float, float, float]]]:
    import psutil
    from pyspark.sql import functions as F

    from perf.spark_null_source import NullSource
    from spark import session

    s = session("bench-spark-cpu", "local[2]", **{"spark.ui.enabled": "false"})
    s.sparkContext.setLogLevel("ERROR")
    s.dataSource.register(NullSource)
    jvm = next(c for c in psutil.Process().children() if "java" in c.name())

    def cpu() -> tuple[float, float]:
        t = jvm.cpu_times()
        py = 0.0
        for c in jvm.children(recursive=True):  # the Python daemon and its workers
            try:
                ct = c.cpu_times()
            except psutil.NoSuchProcess:
                continue
            py += ct.user + ct.system + ct.children_user + ct.children_system
        return t.user + t.system, py

    def run(fmt: str, query: str, whole: bool) -> tuple[float, float, float]:
        want = expect if whole else 0
        if fmt == "appliance":
            r = (s.read.format(fmt).option("log.dirs", log_dir).option("subscribe", "bench")
                 .option("startingOffsets", "earliest" if whole else "latest"))
        else:
            r = (s.read.format(fmt).option("records", str(want)).option("partitions", "2")
                 .option("batch.rows", str(batch_rows)))
        c0, t0 = cpu(), time.perf_counter()
        if query == "noop":
            r.load().write.format("noop").mode("overwrite").save()
        else:
            row = r.load().agg(F.count("*").alias("n"),
                               F.sum(F.length("value")).alias("b")).collect()[0]
            assert row.n == want, row
        dt, c1 = time.perf_counter() - t0, cpu()
        return dt, c1[0] - c0[0], c1[1] - c0[1]

    try:
        out: dict[str, list[tuple[float, float, float]]] = {c[0]: [] for c in CELLS}
        for _, fmt, query, whole in CELLS:  # warm-up
            run(fmt, query, whole)
            run(fmt, query, whole)
        for _ in range(runs):  # cells interleaved, so load swings hit them alike
            for key, fmt, query, whole in CELLS:
                out[key].append(run(fmt, query, whole))
        return out
    finally:
        s.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--code", default=str(REPO), help="checkout whose spark/ and native/ run")
    args = ap.parse_args()
    code = os.path.abspath(args.code)
    sys.path.insert(0, code)
    # the Spark workers import the same code (and perf/spark_null_source.py from here)
    os.environ["PYTHONPATH"] = os.pathsep.join([code, str(REPO)])
    sys.path.insert(1, str(REPO))
    from perf.bench_spark_cluster import write_topic

    with tempfile.TemporaryDirectory(prefix="bench-spark-cpu-") as work:
        log_dir = os.path.join(work, "logs")
        n = write_topic(log_dir, args.records, 2)
        _source_alone(log_dir, 2, n)
        _source_alone(log_dir, 2, n)
        src = [_source_alone(log_dir, 2, n) for _ in range(args.runs)]
        batches = _batches(log_dir, 2)
        spark = _spark_runs(log_dir, n, args.runs, -(-n // batches))

    def med(rows, i):
        return statistics.median(r[i] for r in rows)

    print(f"code: {code}; {n:,} records; medians of {args.runs}; load {os.getloadavg()[0]:.1f}")
    print(f"  source alone: cpu {med(src, 0):.3f} s (sys {med(src, 1):.3f} s), "
          f"{med(src, 2):,.0f} minor faults, {n / med(src, 0) / 1e6:.1f} M records per cpu-s")
    names = {"all": "whole topic", "empty": "empty read", "null": "null source",
             "null empty": "null, empty", "noop": "noop sink", "null noop": "null noop"}
    for key, what in names.items():
        rows = spark[key]
        print(f"  spark {what:11s}: wall {med(rows, 0):.2f} s, cpu jvm {med(rows, 1):.2f} s, "
              f"python workers {med(rows, 2):.2f} s")

    def per_record(whole: str, empty: str | None) -> tuple[float, float]:
        a = spark[whole]
        e = spark[empty] if empty else [(0.0, 0.0, 0.0)]
        return ((med(a, 1) - med(e, 1)) / n * 1e9, (med(a, 2) - med(e, 2)) / n * 1e9)

    jvm, py = per_record("all", "empty")
    print(f"  per record (whole - empty): jvm {jvm:.0f} ns, python workers "
          f"{py:.0f} ns (source alone {med(src, 0) / n * 1e9:.0f} ns of it)")
    njvm, npy = per_record("null", "null empty")
    print(f"  null source per record (whole - empty): jvm {njvm:.0f} ns, python workers "
          f"{npy:.0f} ns: what is ours is jvm {jvm - njvm:+.0f} ns, python {py - npy:+.0f} ns")
    # noop: one stage; its per-query share is not subtracted (no empty run), so compare the two
    ijvm, ipy = per_record("noop", None)
    nnjvm, nnpy = per_record("null noop", None)
    print(f"  noop sink per record, whole query: in place jvm {ijvm:.0f} ns, python {ipy:.0f} "
          f"ns; null source jvm {nnjvm:.0f} ns, python {nnpy:.0f} ns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
