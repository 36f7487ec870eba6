"""A bounded SIGKILL campaign over a 3-broker cluster (tests/cluster/kill_campaign.py; the script
scripts/kill_campaign.py --cluster runs as many rounds as asked): one round of each kind of
victim, under an idempotent acks=all stream and a committing consumer group. Nothing
acknowledged may be lost or doubled, committed offsets never go back, and the replicas end
byte-identical. Replication factor 3 with every kind of victim here; 1 and 2 with a broker and
a disk and cluster worker in tests/cluster/test_kill_campaign_fewer_replicas.py (a module of
its own, so that the two pytest-xdist workers can run the campaigns side by side)."""

from __future__ import annotations

import pytest

from tests.cluster.kill_campaign import KINDS, ClusterCampaign, run_bounded

pytestmark = pytest.mark.timeout(900)


def test_random_sigkills_in_a_cluster_lose_nothing_acknowledged(zk_connect, tmp_path, capsys):
    camp = ClusterCampaign(tmp_path, seed=15, zk_connect=zk_connect, kinds=KINDS)
    run_bounded(camp, len(KINDS), "cluster kill campaign", capsys)
