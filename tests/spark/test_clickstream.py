"""The clickstream pipeline example end to end: clicks through the IPC producer, sessionized by
a streaming job with a watermark, sessions in Parquet and in a compacted topic."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from spark.jobs.clickstream import click_events, produce_clicks, sessionize
from tests.spark.conftest import create_topic, kcat

GAP_MS = 30 * 60_000


def _expected(events: list[dict]) -> dict[tuple[str, int], tuple[int, int]]:
    """(user, session start ms) -> (session end ms, clicks), as session_window defines them."""
    by_user: dict[str, list[int]] = {}
    for e in events:
        by_user.setdefault(e["user"], []).append(e["ts"])
    out = {}
    for user, ts in by_user.items():
        ts.sort()
        start, last, n = ts[0], ts[0], 1
        for t in ts[1:]:
            if t >= last + GAP_MS:
                out[(user, start)] = (last + GAP_MS, n)
                start, n = t, 0
            last = t
            n += 1
        out[(user, start)] = (last + GAP_MS, n)
    return out


def _ms(dt) -> int:
    return int(dt.replace(tzinfo=UTC).timestamp() * 1000)


def test_clickstream_sessions(spark, broker, tmp_path):
    create_topic(broker, "clicks", 2)
    create_topic(broker, "sessions", 1, **{"cleanup.policy": "compact"})
    events = click_events(users=6, events=240, seed=5)
    # A late-arriving straggler (inside the watermark's allowance) and a final event a day
    # later whose only job is to move the watermark past every real session.
    events.insert(len(events) - 3, {**events[-10], "page": "/late"})
    sentinel = {"user": "zz-watermark", "page": "/", "ts": events[-1]["ts"] + 86_400_000}
    n = produce_clicks(broker.bootstrap, "clicks", [*events, sentinel], transport="ipc",
                       shm_name=f"appliance-test-{broker.port}")
    assert n == len(events) + 1
    out = str(tmp_path / "sessions")
    q = sessionize(spark, topic="clicks", sessions_topic="sessions", out=out,
                   checkpoint=str(tmp_path / "ckpt"), bootstrap=broker.bootstrap,
                   log_dirs=",".join(broker.log_dirs), available_now=True)
    q.awaitTermination(300)
    assert q.exception() is None
    want = _expected(events)
    assert len(want) > 6  # several sessions per user
    got = {(r.user, _ms(r.session_start)): (_ms(r.session_end), r.clicks)
           for r in spark.read.parquet(out).collect()}
    assert got == want
    # The compacted topic: one record per session, keyed user@start, same figures.
    topic_rows = kcat(broker, "sessions")
    by_key = {k: json.loads(v) for _, _, k, v, _ in topic_rows}
    assert len(by_key) == len(want)
    for (user, start), (_end, clicks) in want.items():
        key = f"{user}@{datetime.fromtimestamp(start / 1000, UTC):%Y-%m-%dT%H:%M:%S}"
        assert by_key[key]["clicks"] == clicks
