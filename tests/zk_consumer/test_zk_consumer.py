"""The 0.8 high-level (ZooKeeper) consumer against a real ZooKeeper and two real cluster-mode
brokers (issue 43): the documented ZooKeeper layout, the rebalance with its owner claims, the
offsets storages and the migration between them, filters, timeouts and bad inputs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from appliance.client.zk_consumer import (
    Blacklist,
    ConsumerRebalanceFailed,
    ConsumerTimeout,
    Whitelist,
    ZooKeeperUnreachable,
    create_java_consumer_connector,
)
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.errors import InvalidConfigError
from tests.broker_process import free_port
from tests.cluster.harness import wait_for

LOGGER = "appliance.client.zk_consumer"
ROOT = Path(__file__).resolve().parents[2]


def _drain(stream, limit: int) -> list:
    out = []
    try:
        for m in stream:
            out.append(m)
            if len(out) >= limit:
                break
    except ConsumerTimeout:
        pass
    return out


def test_one_connector_reads_every_record_and_registers_as_documented(env):
    env.create_topic("basic", 3)
    env.produce("basic", [f"v{i}" for i in range(30)])
    c = create_java_consumer_connector(env.config("g-basic", consumer_id="c1", consumer_timeout_ms="1500"))
    try:
        streams = c.create_message_streams({"basic": 2})["basic"]
        reg = json.loads(env.zk.get("/consumers/g-basic/ids/c1")[0])
        assert reg["version"] == 1 and reg["subscription"] == {"basic": 2} and reg["pattern"] == "static"
        assert int(reg["timestamp"]) > 0
        assert env.owners("g-basic", "basic") == {0: "c1-0", 1: "c1-0", 2: "c1-1"}
        got = _drain(streams[0], 100) + _drain(streams[1], 100)
        assert sorted(m.message.decode() for m in got) == sorted(f"v{i}" for i in range(30))
        assert {(m.partition, m.offset) for m in got} == {(p, o) for p in range(3) for o in range(10)}
        c.commit_offsets()
        assert env.zk_offsets("g-basic", "basic") == {0: 10, 1: 10, 2: 10}
        started = time.monotonic()
        with pytest.raises(ConsumerTimeout, match="consumer.timeout.ms=1500"):
            next(streams[0])
        assert 1.4 < time.monotonic() - started < 4
    finally:
        c.shutdown()
    assert not env.zk.exists("/consumers/g-basic/ids/c1")
    assert env.owners("g-basic", "basic") == {}


SESSION_S = 4.0  # conftest.FAST's zookeeper.session.timeout.ms


def _seen(procs) -> set[str]:
    return {line[3] for p in procs for line in p.lines}


def test_three_processes_split_six_partitions_and_a_killed_ones_partitions_move(env, consumers):
    env.create_topic("six", 6)
    group = "g-six"
    procs = {f"c{i}": consumers(env.config(group, consumer_id=f"c{i}", auto_commit_interval_ms="1000"), "six")
             for i in range(3)}
    for p in procs.values():
        p.wait_ready()
    # range over the sorted threads c0-0, c1-0, c2-0: two partitions each
    even = {0: "c0-0", 1: "c0-0", 2: "c1-0", 3: "c1-0", 4: "c2-0", 5: "c2-0"}
    wait_for(lambda: env.owners(group, "six") == even, 60, "each consumer owning 2 partitions")

    first = [f"a{i}" for i in range(600)]
    env.produce("six", first)
    wait_for(lambda: _seen(procs.values()) >= set(first), 60, "the first 600 records read")
    by_owner = {cid: {line[1] for line in p.lines} for cid, p in procs.items()}
    assert by_owner == {"c0": {0, 1}, "c1": {2, 3}, "c2": {4, 5}}
    # the auto-commit (every second) stores every position; then 60 more records, and c1 dies
    # right after reading its 20, before its next auto-commit can have run for all of them
    wait_for(lambda: env.zk_offsets(group, "six") == dict.fromkeys(range(6), 100), 30, "the auto-commits")
    more = [f"m{i}" for i in range(60)]
    env.produce("six", more)
    wait_for(lambda: _seen(procs.values()) >= set(more), 60, "60 more records read")
    first += more

    victim = procs["c1"]
    victim.kill()
    killed_at = time.monotonic()
    committed = env.zk_offsets(group, "six")  # nobody writes partitions 2 and 3 until c1's session ends
    after = {0: "c0-0", 1: "c0-0", 2: "c0-0", 3: "c2-0", 4: "c2-0", 5: "c2-0"}
    wait_for(lambda: env.owners(group, "six") == after, 30, "c1's partitions moving to c0 and c2")
    moved_in = time.monotonic() - killed_at
    # the session timeout (ZooKeeper notices between it and one tick later), then a rebalance
    # that may back off (rebalance.backoff.ms) while the other survivor has not released yet
    assert moved_in < SESSION_S + 3.0, moved_in

    second = [f"b{i}" for i in range(600)]
    env.produce("six", second)
    survivors = [procs["c0"], procs["c2"]]
    wait_for(lambda: _seen(survivors) >= set(second), 60, "the second 600 records read")
    assert _seen(procs.values()) == set(first) | set(second)  # nothing lost

    counts: dict[tuple[int, int], int] = {}
    for p in procs.values():
        for _, part, off, _ in p.lines:
            counts[(part, off)] = counts.get((part, off), 0) + 1
    duplicates = {k for k, n in counts.items() if n > 1}
    # at-least-once: exactly what c1 handed out after its last auto-commit is read again, once
    expected = {(part, off) for _, part, off, _ in victim.lines if off >= committed.get(part, 0)}
    assert duplicates == expected
    assert all(counts[k] == 2 for k in duplicates)
    # bounded by the auto-commit interval: at most what c1 read since its last commit (the 20)
    assert len(duplicates) <= 20
    print(f"duplicates after SIGKILL: {len(duplicates)} (c1 committed {committed}); moved in {moved_in:.1f} s")
    for p in survivors:
        assert p.stop() == 0
    assert env.owners(group, "six") == {}


def _read_until(stream, want: int, timeout: float = 30.0) -> list:
    """Messages from ``stream`` until ``want`` arrived (its consumer.timeout.ms keeps each wait short)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out += _drain(stream, want - len(out))
    return out


def test_a_whitelist_stream_picks_up_a_topic_created_later(env):
    env.create_topic("wl-a", 2)
    env.produce("wl-a", [f"a{i}" for i in range(10)])
    c = create_java_consumer_connector(env.config("g-wl", consumer_id="w1", consumer_timeout_ms="500"))
    try:
        [stream] = c.create_message_streams_by_filter(Whitelist("wl-.*"), 1)
        reg = json.loads(env.zk.get("/consumers/g-wl/ids/w1")[0])
        assert reg["subscription"] == {"wl-.*": 1} and reg["pattern"] == "white_list"
        assert sorted(m.message for m in _read_until(stream, 10)) == sorted(f"a{i}".encode() for i in range(10))
        env.create_topic("wl-b", 3)
        env.produce("wl-b", [f"b{i}" for i in range(9)])
        got = _read_until(stream, 9)
        assert sorted((m.topic, m.message) for m in got) == sorted(("wl-b", f"b{i}".encode()) for i in range(9))
        assert env.owners("g-wl", "wl-b") == {0: "w1-0", 1: "w1-0", 2: "w1-0"}
    finally:
        c.shutdown()


def test_partitions_added_to_a_subscribed_topic_are_claimed(env):
    env.create_topic("grow", 1)
    c = create_java_consumer_connector(env.config("g-grow", consumer_id="gr", consumer_timeout_ms="500"))
    try:
        [stream] = c.create_message_streams({"grow": 1})["grow"]
        assert env.owners("g-grow", "grow") == {0: "gr-0"}
        admin = AdminClient({"bootstrap.servers": env.boot})
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(60)
        wait_for(lambda: env.owners("g-grow", "grow") == {0: "gr-0", 1: "gr-0", 2: "gr-0"}, 30,
                 "the new partitions claimed")
        wait_for(lambda: env.zk.exists("/brokers/topics/grow/partitions/2/state"), 30, "partition 2's state")
        env.produce("grow", ["p2"], partition=2)
        assert [(m.partition, m.message) for m in _read_until(stream, 1)] == [(2, b"p2")]
    finally:
        c.shutdown()


def test_roundrobin_deals_partitions_to_the_sorted_threads_in_turn(env):
    env.create_topic("rr", 4)
    made = []
    try:
        for cid in ("ra", "rb"):
            c = create_java_consumer_connector(env.config("g-rr", consumer_id=cid,
                                                          partition_assignment_strategy="roundrobin"))
            made.append(c)
            c.create_message_streams({"rr": 1})
        wait_for(lambda: env.owners("g-rr", "rr") == {0: "ra-0", 1: "rb-0", 2: "ra-0", 3: "rb-0"}, 30,
                 "partitions dealt in turn")
        made.pop().shutdown()  # rb leaves: ra takes all four at once (its ids watch fires)
        wait_for(lambda: env.owners("g-rr", "rr") == dict.fromkeys(range(4), "ra-0"), 30, "ra owning all")
    finally:
        for c in made:
            c.shutdown()


def test_filters_match_whole_names_and_skip_internal_topics():
    assert Whitelist("wl-.*").allows("wl-b") and not Whitelist("wl").allows("wl-b")
    assert Whitelist("a, b").allows("b")  # Kafka's comma form
    assert Blacklist("six").allows("seven") and not Blacklist("six").allows("six")
    assert not Blacklist("six").allows("__consumer_offsets")
    assert Blacklist("six").allows("__consumer_offsets", exclude_internal=False)
    with pytest.raises(ValueError, match="not a regular expression"):
        Whitelist("(")


def test_a_stale_owner_node_makes_the_rebalance_wait_until_its_session_ends(env, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    env.create_topic("stale", 2)
    # a consumer that died: its owner node stays until its session expires (here: is closed)
    dead = open_session(ZkSettings(env.connect, 30000, 30000))
    dead.create("/consumers/g-stale/owners/stale/1", b"dead-consumer-0", ephemeral=True, makepath=True)
    c = create_java_consumer_connector(env.config("g-stale", consumer_id="s1"))
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(streams=c.create_message_streams({"stale": 1})))
    try:
        t.start()
        wait_for(lambda: "waiting for that stale owner's ZooKeeper session to expire" in caplog.text, 30,
                 "the rebalance to say it waits for the stale owner")
        assert "stale-1 is owned by dead-consumer-0" in caplog.text
        assert t.is_alive() and env.owners("g-stale", "stale") == {1: "dead-consumer-0"}  # nothing half-claimed
        dead.stop()
        dead.close()
        t.join(30)
        assert not t.is_alive() and "streams" in done
        assert env.owners("g-stale", "stale") == {0: "s1-0", 1: "s1-0"}
    finally:
        dead.stop()
        dead.close()
        t.join(30)
        c.shutdown()


def test_a_stale_owner_that_outlasts_the_retries_fails_the_rebalance_clearly(env):
    env.create_topic("stale2", 1)
    dead = open_session(ZkSettings(env.connect, 30000, 30000))
    dead.create("/consumers/g-stale2/owners/stale2/0", b"dead-consumer-0", ephemeral=True, makepath=True)
    c = create_java_consumer_connector(env.config("g-stale2", rebalance_max_retries="3",
                                                  rebalance_backoff_ms="100"))
    try:
        with pytest.raises(ConsumerRebalanceFailed, match=r"after 3 attempts \(rebalance.max.retries\).*stale owner"):
            c.create_message_streams({"stale2": 1})
    finally:
        c.shutdown()
        dead.stop()
        dead.close()


def test_bad_inputs_are_named(env, tmp_path, caplog):
    with pytest.raises(InvalidConfigError, match=r"config fetch.size='1': unknown key"):
        create_java_consumer_connector(env.config("g-bad", **{"fetch.size": "1"}))
    with pytest.raises(InvalidConfigError, match=r"config rebalance.max.retries='many': expected an integer"):
        create_java_consumer_connector(env.config("g-bad", rebalance_max_retries="many"))
    with pytest.raises(InvalidConfigError, match=r"config offsets.storage='disk'"):
        create_java_consumer_connector(env.config("g-bad", offsets_storage="disk"))
    with pytest.raises(InvalidConfigError, match="config group.id is required"):
        create_java_consumer_connector({"zookeeper.connect": env.connect})
    with pytest.raises(InvalidConfigError, match="needs zookeeper.connect"):
        create_java_consumer_connector({"bootstrap.servers": env.boot, "group.id": "g-bad"})
    with pytest.raises(InvalidConfigError, match="No such file"):
        create_java_consumer_connector(tmp_path / "missing.properties")

    # both: zookeeper.connect wins, said once; a properties file is read like a dict
    caplog.set_level(logging.WARNING, logger=LOGGER)
    props = tmp_path / "consumer.properties"
    props.write_text(f"zookeeper.connect={env.connect}\ngroup.id=g-both\nbootstrap.servers={env.boot}\n"
                     "consumer.timeout.ms=200\n")
    c = create_java_consumer_connector(props)
    try:
        assert c.config["consumer.timeout.ms"] == 200 and c.config["client.id"] == "g-both"
    finally:
        c.shutdown()
    said = [r for r in caplog.records if "zookeeper.connect takes precedence" in r.getMessage()]
    assert len(said) == 1

    # nothing listens: a clear error once zookeeper.connection.timeout.ms has passed, no hang
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnreachable, match=r"did not answer within 1500 ms \(zookeeper.connection.timeout.ms\)"):
        create_java_consumer_connector({"zookeeper.connect": f"127.0.0.1:{free_port()}", "group.id": "g-bad",
                                        "zookeeper.connection.timeout.ms": "1500"})
    assert 1.4 < time.monotonic() - started < 5.0


def _kafka_committed(env, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    from appliance.client import Consumer

    c = Consumer(bootstrap_servers=env.boot, group_id=group)
    try:
        return {p: c.committed((topic, p)) for p in range(partitions)}
    finally:
        c.close()


def _phase(env, group: str, values: list[str], **settings: str) -> list:
    """Produce ``values`` to "mig", read with a connector of ``settings`` until there is nothing
    more, shut it down (committing)."""
    env.produce("mig", values)
    c = create_java_consumer_connector(env.config(group, consumer_timeout_ms="1000", **settings))
    try:
        [stream] = c.create_message_streams({"mig": 1})["mig"]
        got = _read_until(stream, len(values))
        got += _drain(stream, 100)  # nothing more: no re-read
    finally:
        c.shutdown()
    return got


def test_offsets_migrate_from_zookeeper_to_kafka_without_rereads_or_skips(env):
    env.create_topic("mig", 2)
    group = "g-mig"
    first, second, third = ([f"{k}{i}" for i in range(20)] for k in "xyz")

    got = _phase(env, group, first, offsets_storage="zookeeper")
    assert sorted(m.message.decode() for m in got) == sorted(first)
    assert env.zk_offsets(group, "mig") == {0: 10, 1: 10}
    assert _kafka_committed(env, group, "mig", 2) == {0: None, 1: None}

    # step 1 of the 0.8.2 migration: kafka + dual commit reads the larger (ZooKeeper's here)
    got = _phase(env, group, second, offsets_storage="kafka", dual_commit_enabled="true")
    assert sorted(m.message.decode() for m in got) == sorted(second)
    assert sorted((m.partition, m.offset) for m in got) == [(p, o) for p in (0, 1) for o in range(10, 20)]
    assert env.zk_offsets(group, "mig") == {0: 20, 1: 20}
    assert _kafka_committed(env, group, "mig", 2) == {0: 20, 1: 20}

    # step 2: dual commit off: Kafka alone, ZooKeeper's offsets stay where the migration left them
    got = _phase(env, group, third, offsets_storage="kafka", dual_commit_enabled="false")
    assert sorted(m.message.decode() for m in got) == sorted(third)
    assert sorted((m.partition, m.offset) for m in got) == [(p, o) for p in (0, 1) for o in range(20, 30)]
    assert _kafka_committed(env, group, "mig", 2) == {0: 30, 1: 30}
    assert env.zk_offsets(group, "mig") == {0: 20, 1: 20}


def test_a_new_style_group_of_the_same_id_coexists(env):
    """The broker knows nothing of ZooKeeper groups: a poll() consumer of the same group id
    forms its own group on the broker, and each reads every record."""
    from appliance.client import Consumer

    env.create_topic("co", 2)
    env.produce("co", [f"c{i}" for i in range(10)])
    zc = create_java_consumer_connector(env.config("g-co", consumer_id="z1", consumer_timeout_ms="500"))
    new = Consumer(bootstrap_servers=env.boot, group_id="g-co", auto_offset_reset="earliest",
                   enable_auto_commit=False)
    try:
        [stream] = zc.create_message_streams({"co": 1})["co"]
        new.subscribe(["co"])
        polled: list = []
        wait_for(lambda: polled.extend(new.poll(0.5)) or len(polled) >= 10, 60, "the new consumer's records")
        got = _read_until(stream, 10)
        assert sorted(r.value for r in polled) == sorted(m.message for m in got) == sorted(
            f"c{i}".encode() for i in range(10))
        assert sorted(new.assignment()) == [("co", 0), ("co", 1)]
        assert env.owners("g-co", "co") == {0: "z1-0", 1: "z1-0"}
        new.commit_sync({("co", 0): 3, ("co", 1): 4})
        zc.commit_offsets()
        assert env.zk_offsets("g-co", "co") == {0: 5, 1: 5}  # each group's offsets where it keeps them
        assert _kafka_committed(env, "g-co", "co", 2) == {0: 3, 1: 4}
    finally:
        new.close()
        zc.shutdown()


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args], capture_output=True,
                          timeout=timeout, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_console_consumer_reads_through_zookeeper(env):
    env.create_topic("cc", 1)
    env.produce("cc", [f"line{i}" for i in range(5)])
    r = _cli("console-consumer", "--zookeeper", env.connect, "--whitelist", "cc.*", "--from-beginning",
             "--group", "g-cc", "--timeout-ms", "1500", "--property", "print.offset=true")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [f"Offset:{i}\tline{i}" for i in range(5)]
    assert "Processed a total of 5 messages" in r.stderr.decode()
    assert env.zk_offsets("g-cc", "cc") == {0: 5}  # committed at shutdown
    assert not env.zk.get_children("/consumers/g-cc/ids")

    # without --group: a made-up console-consumer-<n> group, gone from ZooKeeper afterwards
    r = _cli("console-consumer", "--zookeeper", env.connect, "--topic", "cc", "--from-beginning",
             "--max-messages", "2")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == ["line0", "line1"]
    assert not [g for g in env.zk.get_children("/consumers") if g.startswith("console-consumer-")]


def test_consumer_offset_checker_shows_offsets_lag_and_owners(env):
    from appliance.client import Consumer

    env.create_topic("chk", 2)
    env.produce("chk", [f"v{i}" for i in range(10)])  # 5 per partition
    c = create_java_consumer_connector(env.config("g-chk", consumer_id="k1", consumer_timeout_ms="500",
                                                  auto_commit_enable="false"))
    try:
        [stream] = c.create_message_streams({"chk": 1})["chk"]
        assert len(_read_until(stream, 10)) == 10
        c.commit_offsets()  # ZooKeeper: 5 and 5
        env.produce("chk", [f"w{i}" for i in range(4)])  # log sizes 7 and 7
        # partition 1's offset in Kafka is ahead of ZooKeeper's: the checker shows the larger
        new = Consumer(bootstrap_servers=env.boot, group_id="g-chk")
        new.commit_sync({("chk", 1): 6})
        new.close()
        r = _cli("consumer-offset-checker", "--zkconnect", env.connect, "--group", "g-chk", "--broker-info",
                 "--storage")
        assert r.returncode == 0, r.stderr.decode()
        lines = [line.split() for line in r.stdout.decode().splitlines()]
        assert lines[0] == ["Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner", "Storage"]
        assert lines[1:3] == [["g-chk", "chk", "0", "5", "7", "2", "k1-0", "zookeeper"],
                              ["g-chk", "chk", "1", "6", "7", "1", "k1-0", "kafka"]]
        assert lines[3] == ["BROKER", "INFO"]
        assert sorted(" ".join(x) for x in lines[4:]) == sorted(
            f"{i} -> {b.bootstrap}" for i, b in zip((1, 2), env.brokers, strict=True))
        assert "note: chk-1: Kafka has offset 6, ZooKeeper 5; Offset shows the larger" in r.stderr.decode()
    finally:
        c.shutdown()
    # without --storage: exactly Kafka's columns
    r = _cli("consumer-offset-checker", "--zookeeper", env.connect, "--group", "g-chk", "--topic", "chk")
    lines = [line.split() for line in r.stdout.decode().splitlines()]
    assert lines == [["Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner"],
                     ["g-chk", "chk", "0", "5", "7", "2", "none"],  # owners released at shutdown
                     ["g-chk", "chk", "1", "6", "7", "1", "none"]]


def test_the_tools_fail_in_one_line(env):
    r = _cli("consumer-offset-checker", "--zookeeper", env.connect, "--group", "g-nobody")
    assert r.returncode == 1
    assert r.stderr.decode().strip() == (f"error: group g-nobody has no topics in ZooKeeper at {env.connect} "
                                         "(/consumers/<group>); name them with --topic")
    port = free_port()
    r = _cli("console-consumer", "--zookeeper", f"127.0.0.1:{port}", "--topic", "cc", "--timeout", "1")
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    assert r.stderr.decode().strip().startswith(f"error: ZooKeeper at 127.0.0.1:{port} did not answer within 1000 ms")
    r = _cli("console-consumer", "--zookeeper", env.connect, "--topic", "cc", "--consumer.config", "/nonexistent")
    assert r.returncode == 2 and r.stderr.decode().strip() == "error: --consumer.config /nonexistent: No such file or directory"


def test_an_expired_session_registers_again_and_takes_its_partitions_back(env):
    from tests.cluster.zk import expire_session

    env.create_topic("exp", 2)
    env.produce("exp", [f"e{i}" for i in range(6)])
    c = create_java_consumer_connector(env.config("g-exp", consumer_id="x1", consumer_timeout_ms="500"))
    try:
        [stream] = c.create_message_streams({"exp": 1})["exp"]
        assert len(_read_until(stream, 6)) == 6
        c.commit_offsets()
        old = c.zk.client_id[0]
        expire_session(c.zk, env.zk_server.connect)  # its ids and owner nodes go with it

        def again() -> bool:  # the nodes are back, made by the new session
            nodes = ["/consumers/g-exp/ids/x1", "/consumers/g-exp/owners/exp/0", "/consumers/g-exp/owners/exp/1"]
            stats = [env.zk.exists(n) for n in nodes]
            return (all(st is not None and st.ephemeralOwner not in (0, old) for st in stats)
                    and env.owners("g-exp", "exp") == {0: "x1-0", 1: "x1-0"})

        wait_for(again, 30, "x1 registered and owning again in its new session")
        env.produce("exp", [f"f{i}" for i in range(4)])
        assert sorted(m.message.decode() for m in _read_until(stream, 4)) == [f"f{i}" for i in range(4)]
    finally:
        c.shutdown()


def test_the_fetcher_follows_a_new_leader(env, caplog):
    """Last in the module: it SIGKILLs a broker (the module's teardown kills the rest)."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    env.create_topic("lead", 1, replicas=2)
    wait_for(lambda: len(json.loads(env.zk.get("/brokers/topics/lead/partitions/0/state")[0])["isr"]) == 2,
             30, "both replicas in sync")
    env.produce("lead", [f"l{i}" for i in range(10)])
    c = create_java_consumer_connector(env.config("g-lead", consumer_timeout_ms="500"))
    try:
        [stream] = c.create_message_streams({"lead": 1})["lead"]
        assert len(_read_until(stream, 10)) == 10
        leader = json.loads(env.zk.get("/brokers/topics/lead/partitions/0/state")[0])["leader"]
        env.brokers[leader - 1].kill()
        wait_for(lambda: json.loads(env.zk.get("/brokers/topics/lead/partitions/0/state")[0])["leader"]
                 not in (leader, -1), 60, "a new leader")
        env.produce("lead", [f"n{i}" for i in range(10)])
        started = time.monotonic()
        got = _read_until(stream, 10, timeout=60)
        # a refused connect to the dead leader is given up quickly, then Metadata names the new one
        assert time.monotonic() - started < 10
        assert [m.message.decode() for m in got] == [f"n{i}" for i in range(10)]
        assert [m.offset for m in got] == list(range(10, 20))
        assert "looking its leader up again" in caplog.text
    finally:
        c.shutdown()
