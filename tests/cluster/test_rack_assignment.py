"""Rack-aware replica assignment (KIP-36, Kafka's AdminUtils): Kafka's own published examples,
and the properties its rack tests check over many shapes: every partition's replicas span
min(RF, racks) racks, no broker twice, leaders and replicas spread evenly; brokers with and
without a rack are refused unless racks are ignored."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from appliance.cluster.assignment import (
    DISABLED,
    SAFE,
    RackInformationMissing,
    assign_replicas,
    rack_alternated,
)

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_kafkas_published_examples():
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    assert rack_alternated(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in KAFKA_RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(range(6), 7, 3, start_index=0, racks=KAFKA_RACKS) == {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3), 6: (0, 4, 2)}


SHAPES = [  # (brokers per rack, partitions, RF)
    ((2, 2, 2), 6, 3), ((2, 2, 2), 12, 2), ((1, 1, 1), 6, 3), ((3, 3), 12, 3), ((2, 2, 1), 10, 3),
    ((4, 1, 1), 12, 2), ((2, 2, 2, 2), 16, 3), ((3, 3, 3), 9, 1),
]


@pytest.mark.parametrize("per_rack,partitions,rf", SHAPES)
def test_replicas_span_the_racks_and_spread_evenly(per_rack, partitions, rf):
    racks, b = {}, 0
    for i, n in enumerate(per_rack):
        for _ in range(n):
            racks[b] = f"r{i}"
            b += 1
    num_racks = len(per_rack)
    for seed in range(5):
        plan = assign_replicas(racks, partitions, rf, racks=racks, rng=random.Random(seed))
        assert sorted(plan) == list(range(partitions))
        for replicas in plan.values():
            assert len(replicas) == rf == len(set(replicas))
            assert len({racks[r] for r in replicas}) == min(rf, num_racks)
        if len(set(per_rack)) == 1:  # equal racks: leaders and replicas as even as can be
            leaders = Counter(r[0] for r in plan.values())
            assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1
            counts = Counter(itertools.chain.from_iterable(plan.values()))
            assert max(counts.values()) - min(counts.get(b, 0) for b in racks) <= 1


def test_some_brokers_without_a_rack():
    racks = {0: "a", 1: "b", 2: None}
    with pytest.raises(RackInformationMissing, match=r"Not all brokers have rack information.*\[2\]"):
        assign_replicas([0, 1, 2], 3, 2, racks=racks)
    # the broker's own topics (auto-created, __consumer_offsets) and --disable-rack-aware: racks ignored
    unaware = assign_replicas([0, 1, 2], 3, 2, start_index=0)
    assert assign_replicas([0, 1, 2], 3, 2, start_index=0, racks=racks, mode=SAFE) == unaware
    assert assign_replicas([0, 1, 2], 3, 2, start_index=0, racks={0: "a", 1: "b", 2: "c"},
                           mode=DISABLED) == unaware


def test_added_partitions_continue_rack_aware():
    racks = {b: f"r{b % 3}" for b in range(6)}
    first = assign_replicas(racks, 6, 3, start_index=1, racks=racks)
    more = assign_replicas(racks, 6, 3, start_index=1, start_partition=6, racks=racks)
    assert set(more) == set(range(6, 12))
    assert all(len({racks[r] for r in reps}) == 3 for reps in {**first, **more}.values())
