"""`appliance consumer-groups` against real groups: --describe against the real lag, --list,
--reset-offsets in every mode (dry run, refusal for an active group), --delete (refusal for a
non-empty group; a deleted group stays deleted after a broker restart)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from appliance.cli.main import main
from tests.broker.clients import create_topic
from tests.groups.conftest import GROUP_OVERRIDES
from tests.groups.raw import RawMember, connect, describe
from tests.groups.test_clients import _produce


def cli_process(bs: str, *args: str) -> subprocess.CompletedProcess:
    """The real command line, in its own process (start-up costs ~2 s: used once)."""
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", "consumer-groups",
                           "--bootstrap-server", bs, *args], capture_output=True, text=True, timeout=60)


def cli(bs: str, *args: str) -> subprocess.CompletedProcess:
    """The same entry point (appliance.cli.main.main) run in this process, output captured."""
    argv = ["consumer-groups", "--bootstrap-server", bs, *args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as e:  # argparse usage errors
            status = e.code
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def _rows(out: str, group: str) -> dict[tuple[str, int], list[str]]:
    """The table rows of --describe / --reset-offsets: (topic, partition) -> remaining columns."""
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0] == group and cols[2].isdigit():
            rows[(cols[1], int(cols[2]))] = cols[3:]
    return rows


def _committed(port: int, group: str, topic: str, parts: int) -> dict[int, int]:
    with connect(port) as conn:
        r = conn.request(9, {"group_id": group, "topics": [
            {"name": topic, "partition_indexes": list(range(parts))}]})
    return {p.partition_index: p.committed_offset for p in r.topics[0].partitions}


def test_describe_shows_real_lag_and_members(group_broker):
    bs = group_broker.bootstrap
    topic, group = "lag-t", "lag-g"
    create_topic(bs, topic, 3)
    _produce(bs, topic, 90, 3)  # 30 per partition
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "client.id": "lag-client", "heartbeat.interval.ms": 200})
    try:
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += [m for m in c.consume(50 - len(got), 0.1) if m.error() is None]
        assert len(got) == 50
        nxt: dict[int, int] = {}
        for m in got:
            nxt[m.partition()] = max(nxt.get(m.partition(), 0), m.offset() + 1)
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in nxt.items()], asynchronous=False)
        res = cli_process(bs, "--describe", "--group", group)
        assert res.returncode == 0, res.stderr
        rows = _rows(res.stdout, group)
        assert set(rows) == {(topic, p) for p in range(3)}
        for p in range(3):
            current, end, lag, member, host, client = rows[(topic, p)]
            assert end == "30"
            if p in nxt:
                assert (int(current), int(lag)) == (nxt[p], 30 - nxt[p])
            else:
                assert (current, lag) == ("-", "-")
            assert member == c.memberid() and "127.0.0.1" in host and client == "lag-client"
        assert "Stable" in res.stdout
    finally:
        c.close()
    listed = cli(bs, "--list")
    assert listed.returncode == 0 and group in listed.stdout.split()
    # the member left: still listed (its offsets remain), described with no member
    res = cli(bs, "--describe", "--group", group)
    assert all(r[3:] == ["-", "-", "-"] for r in _rows(res.stdout, group).values()), res.stdout
    assert "Empty" in res.stdout


@pytest.fixture(scope="module")
def timed_topic(group_broker):
    """4 partitions x 20 records: 10 produced before a recorded instant, 10 after."""
    bs, topic = group_broker.bootstrap, "reset-t"
    create_topic(bs, topic, 4)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    base = int(time.time() * 1000) - 60_000
    for half in (0, 1):
        for i in range(40):
            p.produce(topic, b"v", partition=i % 4, timestamp=base + half * 30_000 + i)
        assert p.flush(10) == 0
    return topic, base + 30_000


def _seed(port: int, group: str, topic: str, offsets: dict[int, int]) -> None:
    m = RawMember(port, group, [topic])
    assert set(m.commit({(topic, p): o for p, o in offsets.items()}, generation=-1, member_id="").values()) == {0}
    m.close()


@pytest.mark.parametrize("mode,args,expect", [
    ("earliest", ["--to-earliest"], {0: 0, 1: 0, 2: 0, 3: 0}),
    ("latest", ["--to-latest"], {0: 20, 1: 20, 2: 20, 3: 20}),
    ("offset", ["--to-offset", "7"], {0: 7, 1: 7, 2: 7, 3: 7}),
    ("offset-clamped", ["--to-offset", "999"], {0: 20, 1: 20, 2: 20, 3: 20}),
    ("datetime", None, {0: 10, 1: 10, 2: 10, 3: 10}),
])
def test_reset_offsets_modes(group_broker, timed_topic, mode, args, expect):
    topic, middle = timed_topic
    bs, group = group_broker.bootstrap, f"reset-{mode}"
    _seed(group_broker.port, group, topic, {0: 3, 1: 4, 2: 5, 3: 6})
    if args is None:
        iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle // 1000)) + f".{middle % 1000:03d}"
        args = ["--to-datetime", iso]
    dry = cli(bs, "--reset-offsets", "--group", group, "--topic", topic, *args)
    assert dry.returncode == 0, dry.stderr
    assert {k[1]: int(v[0]) for k, v in _rows(dry.stdout, group).items()} == expect
    assert _committed(group_broker.port, group, topic, 4) == {0: 3, 1: 4, 2: 5, 3: 6}  # dry run
    done = cli(bs, "--reset-offsets", "--group", group, "--topic", topic, *args, "--execute")
    assert done.returncode == 0, done.stderr
    assert _committed(group_broker.port, group, topic, 4) == expect


def test_reset_offsets_selected_partitions_and_all_topics(group_broker, timed_topic):
    topic, _ = timed_topic
    bs, group = group_broker.bootstrap, "reset-some"
    _seed(group_broker.port, group, topic, {0: 3, 1: 4, 2: 5, 3: 6})
    res = cli(bs, "--reset-offsets", "--group", group, "--topic", f"{topic}:1,3", "--to-earliest", "--execute")
    assert res.returncode == 0, res.stderr
    assert _committed(group_broker.port, group, topic, 4) == {0: 3, 1: 0, 2: 5, 3: 0}
    res = cli(bs, "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute")
    assert res.returncode == 0, res.stderr
    assert _committed(group_broker.port, group, topic, 4) == {0: 20, 1: 20, 2: 20, 3: 20}


def test_reset_refused_for_active_group_and_delete_refused_when_not_empty(group_broker, timed_topic):
    topic, _ = timed_topic
    bs, group = group_broker.bootstrap, "reset-active"
    m = RawMember(group_broker.port, group, [topic], session_timeout_ms=10000)
    m.join()
    m.sync({m.member_id: [(topic, [0, 1, 2, 3])]})
    assert set(m.commit({(topic, 0): 5}).values()) == {0}
    try:
        res = cli(bs, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert res.returncode != 0 and "Stable" in res.stderr
        assert _committed(group_broker.port, group, topic, 1) == {0: 5}
        res = cli(bs, "--delete", "--group", group)
        assert res.returncode != 0 and "not empty" in res.stderr
        with connect(group_broker.port) as conn:
            assert describe(conn, group).group_state == "Stable"
    finally:
        assert m.leave() == 0
        m.close()
    res = cli(bs, "--delete", "--group", group)
    assert res.returncode == 0, res.stderr
    assert group not in cli(bs, "--list").stdout.split()
    res = cli(bs, "--delete", "--group", group)
    assert res.returncode != 0  # GROUP_ID_NOT_FOUND


def test_reset_usage_errors(group_broker):
    bs = group_broker.bootstrap
    for args in (["--reset-offsets", "--group", "g", "--topic", "t"],             # no --to-*
                 ["--reset-offsets", "--group", "g", "--to-earliest"],            # no scope
                 ["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
                 ["--describe"]):                                                 # no --group
        res = cli(bs, *args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr)


def test_deleted_group_stays_deleted_after_restart(broker_factory):
    b = broker_factory(overrides=GROUP_OVERRIDES).start()
    create_topic(b.bootstrap, "del-t", 2)
    for g in ("del-g", "keep-g"):
        _seed(b.port, g, "del-t", {0: 1, 1: 2})
    res = cli(b.bootstrap, "--delete", "--group", "del-g")
    assert res.returncode == 0, res.stderr
    b.stop()
    b.start()
    assert cli(b.bootstrap, "--list").stdout.split() == ["keep-g"]
    assert _committed(b.port, "del-g", "del-t", 2) == {0: -1, 1: -1}
    assert _committed(b.port, "keep-g", "del-t", 2) == {0: 1, 1: 2}
