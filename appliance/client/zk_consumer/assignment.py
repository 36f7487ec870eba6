"""Which partitions each of a consumer's threads owns after a rebalance: the design documents'
algorithm, computed the same way by every member from what ZooKeeper holds.

A consumer registered with ``{topic: n}`` has threads ``<consumer_id>-0`` .. ``-(n-1)`` for that
topic (a filter's registration gives its n threads every topic the filter allows). The threads
are the members handed to the group assignors of :mod:`appliance.client.assignors`: ``range``
sorts, per topic, the threads and the partitions and gives each thread a consecutive run (the
first ``partitions % threads`` one more); ``roundrobin`` deals all partitions, sorted, to the
sorted threads in turn (meant for members with the same subscription, as 0.8.2 says).
Pure functions.
"""

from __future__ import annotations

from appliance.client.assignors import make_assignor
from appliance.client.subscription import Subscription
from appliance.client.zk_consumer.filters import filter_for
from appliance.client.zk_consumer.znodes import STATIC, Registration

__all__ = ["topic_threads", "thread_id", "consumer_of", "assign"]


def thread_id(consumer_id: str, n: int) -> str:
    return f"{consumer_id}-{n}"


def consumer_of(thread: str) -> str:
    return thread.rpartition("-")[0]


def topic_threads(consumer_id: str, reg: Registration, all_topics: list[str],
                  exclude_internal: bool) -> dict[str, list[str]]:
    """{topic: [thread ids]} of one consumer's registration (a filter applied to
    ``all_topics``)."""
    if reg.pattern == STATIC:
        counts = reg.subscription
    else:
        (regex, n), = reg.subscription.items()
        f = filter_for(reg.pattern, regex)
        counts = {t: n for t in all_topics if f.allows(t, exclude_internal)}
    return {t: [thread_id(consumer_id, i) for i in range(n)] for t, n in counts.items()}


def assign(me: str, registrations: dict[str, Registration], all_topics: list[str],
           partition_counts: dict[str, int], strategy: str,
           exclude_internal: bool = True) -> dict[tuple[str, int], str]:
    """{(topic, partition): thread id} for ``me``'s threads. Topics without a partition count
    (not created yet) are left out; give the counts of every member's topics."""
    threads: dict[str, set[str]] = {}  # thread -> topics
    for cid, reg in registrations.items():
        for topic, tids in topic_threads(cid, reg, all_topics, exclude_internal).items():
            for tid in tids:
                threads.setdefault(tid, set()).add(topic)
    members = {tid: Subscription(0, sorted(ts), None, []) for tid, ts in threads.items()}
    mine = set(topic_threads(me, registrations[me], all_topics, exclude_internal))
    # every member's topics, not only ours: roundrobin deals across all of them
    counts = {t: n for t, n in partition_counts.items() if any(t in ts for ts in threads.values())}
    result = make_assignor(strategy).assign(members, counts)
    return {(t, p): tid for tid, by_topic in result.items() if consumer_of(tid) == me
            for t, ps in by_topic.items() for p in ps if t in mine}
