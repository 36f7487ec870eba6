"""FileRemover: removals off the caller's thread, in order, errors logged and survived; close
waits (bounded), and after it removals happen at once. Also a partition's expired segments
going through a log dir's remover."""

from __future__ import annotations

import logging
import os
import threading

from appliance.config import BrokerConfig, TopicConfig
from appliance.storage.file_remover import FileRemover, remove_now
from appliance.storage.log_dir import LogDir
from tests.storage.conftest import Clock, batch


def _tree(root, files: int = 3) -> str:
    os.makedirs(root / "sub")
    for i in range(files):
        (root / f"f{i}").write_bytes(b"x" * 4096)
    (root / "sub" / "g").write_bytes(b"y")
    return str(root)


def test_removes_dirs_and_files_on_its_own_thread(tmp_path):
    r = FileRemover(str(tmp_path))
    d = _tree(tmp_path / "t-0.abc-delete")
    f = tmp_path / "00000000000000000000.log.deleted"
    f.write_bytes(b"z" * 100)
    r.remove([d, str(f)])
    assert any(t.name == f"remover {tmp_path}" and t.is_alive() for t in threading.enumerate())
    assert r.wait_idle(10) and r.pending == 0
    assert sorted(os.listdir(tmp_path)) == []
    assert r.shutdown(10)
    assert not any(t.name == f"remover {tmp_path}" for t in threading.enumerate())


def test_an_error_is_logged_and_the_next_removal_still_happens(tmp_path, caplog):
    r = FileRemover("x")
    (tmp_path / "file").write_bytes(b"")
    keep_going = _tree(tmp_path / "t-1.abc-delete")
    with caplog.at_level(logging.WARNING, logger="appliance.storage.file_remover"):
        r.remove([str(tmp_path / "file" / "below-a-file"), str(tmp_path / "missing")])
        r.remove([keep_going])
        assert r.wait_idle(10)
    assert os.listdir(tmp_path) == ["file"]
    # the missing path is fine; the one below a file is named with its error
    assert [m for m in caplog.messages if "cannot remove" in m] == [
        f"cannot remove {tmp_path}/file/below-a-file: [Errno 20] Not a directory: "
        f"'{tmp_path}/file/below-a-file' (the next start tries again)"]
    r.shutdown(10)


def test_close_waits_for_the_queue_then_removes_at_once(tmp_path):
    r = FileRemover("x")
    dirs = [_tree(tmp_path / f"t-{i}.abc-delete", files=200) for i in range(5)]
    r.remove(dirs)
    assert r.shutdown(30)
    assert os.listdir(tmp_path) == []
    late = _tree(tmp_path / "t-9.abc-delete")
    r.remove([late])  # closed: no thread, done before it returns
    assert not os.path.exists(late)
    assert r.shutdown(0)  # idempotent


def test_remove_now_is_the_same_without_a_thread(tmp_path):
    d = _tree(tmp_path / "t-0.abc-delete")
    remove_now([d, str(tmp_path / "missing")])
    assert os.listdir(tmp_path) == []


def test_expired_segments_go_through_the_log_dirs_remover(tmp_path):
    bc = BrokerConfig.load(overrides={"log.dirs": str(tmp_path / "d"), "log.writeback.mode": "os"})
    clock = Clock()
    d = LogDir.open(str(tmp_path / "d"), bc, now_ms=clock)
    plog = d.create_partition("t", 0, TopicConfig.from_overrides(
        bc, {"segment.bytes": "4096", "retention.ms": "1000", "file.delete.delay.ms": "0"}))
    for _ in range(100):
        plog.append(batch(n=2, ts=clock.now))

    def names(suffix: str) -> list[str]:
        return [n for n in os.listdir(plog.path) if n.endswith(suffix)]

    segments = len(names(".log"))
    assert segments > 2
    clock.now += 10_000
    d.run_periodic(clock.now + bc["log.retention.check.interval.ms"])  # retention, then the purge
    assert any(t.name == f"remover {d.path}" for t in threading.enumerate())  # queued, not removed inline
    assert d.remover.wait_idle(10)
    assert plog.log_start_offset > 0 and len(plog.segments()) == 1
    assert len(names(".log")) == 1 and not names(".deleted")
    d.close()
