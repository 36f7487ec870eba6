"""Which local replica a task reads in place (no processes: the rules of spark/replicas.py)."""

from __future__ import annotations

from spark.replicas import LocalReplica, choose_replica, dir_owner, local_replicas


def test_owner_from_meta_properties(tmp_path):
    d = tmp_path / "d0"
    d.mkdir()
    assert dir_owner(str(d)) is None  # says nothing: no meta.properties, no broker's table
    (d / "meta.properties").write_text("version=0\nbroker.id=4\ncluster.id=abc\n")
    assert dir_owner(str(d)) == 4
    (d / "t-0").mkdir()
    assert local_replicas([str(d), str(tmp_path / "missing")], "t", 0) == [
        LocalReplica(4, str(d / "t-0"))]


def test_only_in_sync_replicas_are_read_the_leaders_first():
    a, b, c = LocalReplica(0, "/b0/t-0"), LocalReplica(1, "/b1/t-0"), LocalReplica(2, "/b2/t-0")
    assert choose_replica([a, b, c], isr=(0, 1, 2), leader=1, replication_factor=3) == b
    assert choose_replica([a, c], isr=(0, 1, 2), leader=1, replication_factor=3) == a
    assert choose_replica([c], isr=(0, 1), leader=1, replication_factor=3) is None  # lagging
    assert choose_replica([], isr=(0,), leader=0, replication_factor=1) is None


def test_unknown_owner_only_for_an_unreplicated_partition():
    unknown = LocalReplica(None, "/x/t-0")
    assert choose_replica([unknown], isr=(0,), leader=0, replication_factor=1) == unknown
    assert choose_replica([unknown], isr=(0, 1, 2), leader=0, replication_factor=3) is None
