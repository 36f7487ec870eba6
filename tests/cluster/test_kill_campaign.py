"""A bounded SIGKILL campaign over a 3-broker cluster (tests/cluster/kill_campaign.py; the script
scripts/kill_campaign.py --cluster runs as many rounds as asked): one round of each kind of
victim, under an idempotent acks=all stream and a committing consumer group. Nothing
acknowledged may be lost or doubled, committed offsets never go back, and the replicas end
byte-identical."""

from __future__ import annotations

import pytest

from tests.cluster.kill_campaign import KINDS, ClusterCampaign

pytestmark = pytest.mark.timeout(900)


def test_random_sigkills_in_a_cluster_lose_nothing_acknowledged(zk_connect, tmp_path, capsys):
    camp = ClusterCampaign(tmp_path, seed=15, zk_connect=zk_connect, kinds=KINDS)
    try:
        camp.start()
        victims = [camp.round() for _ in KINDS]
        camp.check_group_caught_up()
        differing = camp.differing_replicas()
    finally:
        camp.close()
    rep = camp.report
    with capsys.disabled():
        print(f"\ncluster kill campaign: {rep.line()}; victims {victims}; back in every ISR after "
              f"max {max(rep.restart_seconds):.1f} s")
    assert not rep.problems, rep.problems[:10]
    assert rep.rounds == len(KINDS)
    assert rep.acked > 1000 and rep.consumed > 0 and rep.commits > 0
    assert rep.crc_errors == 0
    assert not differing, f"partitions whose replicas differ: {differing}"
