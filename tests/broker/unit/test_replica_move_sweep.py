"""sweep_moves: how a start settles a move between log dirs that a crash interrupted."""

from __future__ import annotations

import os

from appliance.broker.disk.replica_move import sweep_moves


def _mk(path, *files: str) -> None:
    os.makedirs(path)
    for f in files:
        (path / f).write_bytes(b"x")


def test_a_future_replica_of_a_partition_still_at_its_source_is_removed(tmp_path):
    src, dst = tmp_path / "d0", tmp_path / "d1"
    _mk(src / "t.a-0", "00000000000000000000.log")
    _mk(dst / "t.a-0.0123abcd-future", "00000000000000000000.log")
    sweep_moves(str(dst), [str(src), str(dst)])
    assert os.listdir(dst) == []
    assert os.listdir(src / "t.a-0") == ["00000000000000000000.log"]


def test_a_future_replica_whose_source_was_retired_becomes_the_partition(tmp_path):
    src, dst = tmp_path / "d0", tmp_path / "d1"
    _mk(src / "t.a-0.99ff-delete", "00000000000000000000.log")
    _mk(dst / "t.a-0.0123abcd-future", "00000000000000000000.log", "topic.properties")
    sweep_moves(str(dst), [str(src), str(dst)])
    assert os.listdir(dst) == ["t.a-0"]
    assert sorted(os.listdir(dst / "t.a-0")) == ["00000000000000000000.log", "topic.properties"]


def test_other_directories_are_left_alone(tmp_path):
    d = tmp_path / "d0"
    _mk(d / "t-0", "a")
    _mk(d / "t-1.77-delete", "a")  # the log dir's own start removes these
    sweep_moves(str(d), [str(d)])
    assert sorted(os.listdir(d)) == ["t-0", "t-1.77-delete"]
    sweep_moves(str(tmp_path / "missing"), [str(d)])  # a log dir not created yet
