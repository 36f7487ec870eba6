"""process/reload_confirmations.py: the confirmation datagram, and the supervisor's count of
them (the supervisor's SIGHUP tests drive the same through its loop)."""

from __future__ import annotations

import logging
import types

from appliance.broker.disk.worker import DiskWorker
from appliance.process import reload_confirmations as rc
from appliance.process.reload_confirmations import ReloadConfirmations, decode, encode


def test_a_confirmation_round_trips_and_is_capped():
    assert decode(encode(2, 5)) == (2, 5, [])
    assert decode(encode(0, 1, ["a/topic.properties: bad", "b: worse"])) == (0, 1, ["a/topic.properties: bad",
                                                                                   "b: worse"])
    assert len(encode(0, 1, ["x" * 100_000])) == rc.MAX_DATAGRAM
    assert decode(b"nonsense") is None and decode(b"") is None


def test_the_disk_workers_confirmation_is_this_layout():
    """The disk worker writes its confirmation itself: it must decode here."""
    reloads = ReloadConfirmations(["/d0", "/d1"])
    fake = types.SimpleNamespace(reload_reply_to=reloads.reply_to, index=1, slot=3,
                                 table=types.SimpleNamespace(worker=lambda slot: (0, 0.0, 0, 0, 9)))
    DiskWorker._confirm_reload(fake, ["d1/t-0/topic.properties: retention.ms='abc'"])
    assert reloads.drain() == [(1, 9, ["d1/t-0/topic.properties: retention.ms='abc'"])]
    reloads.close()


def test_progress_waits_for_each_told_incarnation_then_ends_once(caplog):
    reloads = ReloadConfirmations(["/d0", "/d1"])
    reloads.reply_to.send(encode(0, 1))  # an answer to an earlier reload: dropped by begin
    reloads.begin({0: 1, 1: 4})
    running = {0: 1, 1: 4}
    reloads.reply_to.send(b"garbage")
    reloads.reply_to.send(encode(1, 3))  # another life of disk worker 1
    with caplog.at_level(logging.WARNING):
        assert not reloads.progress(running)
    assert "unreadable confirmation" in caplog.text and reloads.waiting == {0: 1, 1: 4}
    reloads.reply_to.send(encode(1, 4, ["/d1/x/topic.properties: kept"]))
    assert not reloads.progress(running)
    assert "disk worker 1 [/d1] kept its configs: /d1/x/topic.properties: kept" in caplog.text
    running[0] = 2  # disk worker 0 died and came back: its successor read the files at start
    assert reloads.progress(running)
    assert not reloads.progress(running)  # READY=1 once per reload
    reloads.close()


def test_progress_ends_at_the_deadline_naming_the_silent(caplog):
    reloads = ReloadConfirmations(["/d0", "/d1"])
    reloads.begin({0: 1, 1: 1})
    assert not reloads.progress({0: 1, 1: 1})
    reloads.deadline = 0.0
    assert reloads.progress({0: 1, 1: 1})
    assert "no reload confirmation from disk workers 0, 1" in caplog.text
    reloads.close()


def test_a_reload_with_no_ready_disk_worker_ends_at_once():
    """Every disk worker starting (they read the files afresh anyway): nobody is waited for,
    and the reload still ends, so READY=1 follows RELOADING=1."""
    reloads = ReloadConfirmations(["/d0"])
    assert not reloads.progress({0: 1})  # no reload in progress: nothing to end
    reloads.begin({})
    assert reloads.progress({0: 1})
    assert not reloads.progress({0: 1})
    reloads.close()
