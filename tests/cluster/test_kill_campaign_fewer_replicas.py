"""The bounded cluster SIGKILL campaign of tests/cluster/test_kill_campaign.py with replication
factor 1 and 2: each broker hosts only some partitions, so clients and the group reach brokers
with no replica of a partition. One round each of a broker, a disk worker and a cluster worker;
the same checks (nothing acknowledged lost or doubled, committed offsets never back, replicas
byte-identical)."""

from __future__ import annotations

import pytest

from tests.cluster.kill_campaign import ClusterCampaign, run_bounded

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("rf", (1, 2))
def test_kills_with_fewer_replicas_than_brokers_lose_nothing(zk_connect, tmp_path, capsys, rf):
    """RF 1 promises only what its one replica holds: a SIGKILL leaves the acknowledged records
    in the page cache, and the partition is back with them once its broker restarts."""
    kinds = ("broker", "cluster worker", "disk worker")
    camp = ClusterCampaign(tmp_path, seed=40 + rf, zk_connect=zk_connect, kinds=kinds, partitions=6,
                           replication_factor=rf)
    run_bounded(camp, len(kinds), f"cluster kill campaign, RF {rf}", capsys)
