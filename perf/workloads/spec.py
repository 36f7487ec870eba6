"""The workloads, their sizes in --quick and --full mode, and the goals printed with MET/NOT MET."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["Workload", "workloads", "GOALS", "Goal"]


@dataclass(frozen=True)
class Workload:
    """kind: produce | consume | latency | growth. ``records`` for throughput kinds; ``rate`` and
    ``seconds`` for latency; ``target_bytes`` for growth."""

    name: str
    kind: str
    title: str
    value_size: int = 100
    records: int = 0
    partitions: int = 1
    acks: int = 1
    rate: int = 0
    seconds: float = 0.0
    target_bytes: int = 0
    checkpoints: int = 0
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def workloads(quick: bool) -> list[Workload]:
    """In --quick every size is cut so the whole run (4 systems, 3 runs) fits in ~3 minutes."""
    m = 1_000_000
    q = quick
    out = [
        Workload("produce_100B", "produce", "produce 100 B values, acks=1",
                 records=200_000 if q else 10 * m),
        Workload("produce_1KiB", "produce", "produce 1 KiB values, acks=1", value_size=1024,
                 records=40_000 if q else 2 * m),
        Workload("consume_100B", "consume", "consume 100 B values from the start",
                 records=200_000 if q else 10 * m, extra={"quick": q}),
        Workload("produce_1000p", "produce", "produce 100 B values to 1,000 partitions",
                 records=100_000 if q else 5 * m, partitions=1000),
        Workload("produce_acks_all", "produce", "produce 100 B values, acks=all",
                 records=200_000 if q else 5 * m, acks=-1),
    ]
    if not q:
        out.append(Workload("produce_growth", "growth",
                            "produce 100 B values while the log grows from empty to 20 GiB",
                            target_bytes=20 << 30, checkpoints=4, records=2 * m))
    # Last: a broker that stalls under this load then cannot spoil the other workloads.
    out.append(Workload("latency_10k", "latency", "end-to-end latency at 10,000 records/s",
                        rate=10_000, seconds=2.0 if q else 20.0))
    # issue 15: the pacer sleeps per record, so each produce call is (about) one request
    out.append(Workload("latency_10k_per_record", "latency",
                        "end-to-end latency at 10,000 records/s, pacer sleeping per record",
                        rate=10_000, seconds=2.0 if q else 20.0, extra={"pacer": "per_record"}))
    return out


@dataclass(frozen=True)
class Goal:
    text: str
    key: str


GOALS = [
    Goal("produce >= 3x Redis Streams' redis-benchmark rate (100 B values)", "produce_vs_redis"),
    Goal("consume >= 3x RabbitMQ Streams' rstream rate (100 B values)", "consume_vs_rabbitmq"),
    Goal("p99 end-to-end latency <= 5 ms at 10,000 records/s", "latency_p99"),
    Goal("p99 end-to-end latency <= 5 ms at 10,000 records/s, one record per produce call",
         "latency_p99_per_record"),
    Goal("produce at 20 GiB stored within 10 % of produce at empty", "growth"),
]
