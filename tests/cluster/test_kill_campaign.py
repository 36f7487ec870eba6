"""A bounded SIGKILL campaign over a 3-broker cluster (tests/cluster/kill_campaign.py; the script
scripts/kill_campaign.py --cluster runs as many rounds as asked): one round of each kind of
victim, under an idempotent acks=all stream and a committing consumer group. Nothing
acknowledged may be lost or doubled, committed offsets never go back, and the replicas end
byte-identical. Replication factor 3 with every kind of victim; 1 and 2 (each broker hosts only
some partitions, so clients and the group reach brokers with no replica of a partition) with a
broker and a disk and cluster worker."""

from __future__ import annotations

import pytest

from tests.cluster.kill_campaign import KINDS, ClusterCampaign

pytestmark = pytest.mark.timeout(900)


def _campaign(camp: ClusterCampaign, rounds: int, label: str, capsys) -> None:
    try:
        camp.start()
        victims = [camp.round() for _ in range(rounds)]
        camp.check_group_caught_up()
        differing = camp.differing_replicas()
    finally:
        camp.close()
    rep = camp.report
    with capsys.disabled():
        print(f"\n{label}: {rep.line()}; victims {victims}; back in every ISR after "
              f"max {max(rep.restart_seconds):.1f} s")
    assert not rep.problems, rep.problems[:10]
    assert rep.rounds == rounds
    assert rep.acked > 1000 and rep.consumed > 0 and rep.commits > 0
    assert rep.crc_errors == 0
    assert not differing, f"partitions whose replicas differ: {differing}"


def test_random_sigkills_in_a_cluster_lose_nothing_acknowledged(zk_connect, tmp_path, capsys):
    camp = ClusterCampaign(tmp_path, seed=15, zk_connect=zk_connect, kinds=KINDS)
    _campaign(camp, len(KINDS), "cluster kill campaign", capsys)


@pytest.mark.parametrize("rf", (1, 2))
def test_kills_with_fewer_replicas_than_brokers_lose_nothing(zk_connect, tmp_path, capsys, rf):
    """RF 1 promises only what its one replica holds: a SIGKILL leaves the acknowledged records
    in the page cache, and the partition is back with them once its broker restarts."""
    kinds = ("broker", "cluster worker", "disk worker")
    camp = ClusterCampaign(tmp_path, seed=40 + rf, zk_connect=zk_connect, kinds=kinds, partitions=6,
                           replication_factor=rf)
    _campaign(camp, len(kinds), f"cluster kill campaign, RF {rf}", capsys)
