"""README's config table: every key of the 0.8.2 documentation's config tables is in it, and it is
what appliance.cli.config_table renders from the code now (regenerate with
``python -m appliance.cli.config_table``)."""

from __future__ import annotations

from pathlib import Path

from appliance.cli import config_table as ct
from appliance.cli import seed_keys as sk

REPO = Path(__file__).resolve().parents[2]

# 0.8.2 client keys no client declares (the table says "not accepted yet"): none since the old
# producer's keys and the ZooKeeper consumer's (ZK_CONSUMER_KEYS) were merged. A key that stops
# being declared, or a client branch that declares some, fails the test below by name until this
# and README's table are updated.
UNDECLARED: dict[str, set[str]] = {"consumer": set(), "producer": set(), "new producer": set()}


def _vendored() -> dict[str, list[tuple[str, str]]]:
    return sk.parse_vendored(sk.VENDORED.read_text())


# the shape of the seeds' tables (sections 3.1-3.4 of kafka-0.8.2-documentation.zh.txt), cut down:
# a heading, "key | default | description" rows, a brace shorthand, the topic table that ends the
# broker's section, and the new producer's extra type column
EXCERPT = """3.1 Broker Configs
属性 | 默认值 | 描述 |
broker.id | – | 每个broker的唯一id。 |
log.roll.{ms,hours} | 24 * 7 | 滚动的时间。 |
broker.id | – | 重复的一行。 |
Topic级别的配置
cleanup.policy | delete | 不属于broker的表。 |
3.2 Consumer Configs
group.id | – | 组。 |
3.3 Producer Configs
metadata.broker.list | – | brokers。 |
3.4 New Producer Configs
bootstrap.servers | list | – | high | brokers。 |
4. Design
"""


def test_extractor_reads_the_documentation_tables():
    keys = sk.extract_seed_keys(EXCERPT)
    assert keys == {"broker": [("broker.id", "–"), ("log.roll.ms", "24 * 7"), ("log.roll.hours", "24 * 7")],
                    "consumer": [("group.id", "–")], "producer": [("metadata.broker.list", "–")],
                    "new producer": [("bootstrap.servers", "–")]}


def test_vendored_keys_round_trip():
    """The vendored list (extracted from the seeds by ``python -m appliance.cli.seed_keys``,
    which compares it with them where they are beside the checkout) reads back as written."""
    text = sk.VENDORED.read_text()
    assert sk.render_vendored(sk.parse_vendored(text)) == text


def test_sections_hold_the_documented_tables():
    keys = {sid: [k for k, _ in pairs] for sid, pairs in _vendored().items()}
    assert [sid for sid, _, _ in sk.SECTIONS] == list(keys)
    # spot checks of each table, including a brace-expanded key and the last row
    assert {"broker.id", "log.roll.ms", "log.roll.hours", "log.retention.minutes",
            "offsets.commit.timeout.ms", "connections.max.idle.ms"} <= set(keys["broker"])
    assert "cleanup.policy" not in keys["broker"]  # the topic-level table is not the broker's
    assert keys["consumer"][0] == "group.id" and keys["consumer"][-1] == "dual.commit.enabled"
    assert keys["producer"][0] == "metadata.broker.list" and keys["producer"][-1] == "client.id"
    assert keys["new producer"][-1] == "retry.backoff.ms"


def test_every_documented_key_has_a_row():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index(ct.START):readme.index(ct.END)]
    for sid, pairs in _vendored().items():
        for key, _ in pairs:
            assert f"| `{key}` |" in table, f"{sid} key {key} is not in README's table"
    from appliance.config import BROKER_KEYS, KAFKA_ONLY_KEYS
    for key in [k.name for k in BROKER_KEYS] + list(KAFKA_ONLY_KEYS):  # and every broker key
        assert f"| `{key}` |" in table, f"broker key {key} is not in README's table"


def test_undeclared_client_keys_are_the_expected_ones():
    tuples = ct.client_key_tuples()
    for sid, pairs in _vendored().items():
        if sid == "broker":
            continue
        missing = {k for k, d in pairs if ct.client_row(sid, k, d, tuples)[3].startswith("not accepted")}
        assert missing == UNDECLARED[sid], (
            f"{sid}: now declared: {sorted(UNDECLARED[sid] - missing)}; "
            f"newly undeclared: {sorted(missing - UNDECLARED[sid])}")


def test_every_broker_key_has_an_answer():
    for key, default in _vendored()["broker"]:
        assert not ct.broker_row(key, default)[3].startswith("unknown"), key


def test_readme_table_is_current():
    readme = (REPO / "README.md").read_text()
    fresh = ct.replace_table(readme, ct.render_table(_vendored()))
    assert readme == fresh, "README.md's config table is stale: run python -m appliance.cli.config_table"


def test_zk_consumer_tuple_is_preferred_when_declared():
    # a ZooKeeper consumer's own tuple answers for the 0.8.2 consumer table before CONSUMER_KEYS
    from appliance.client.config import CONSUMER_KEYS, Key
    zk = (Key("zookeeper.connect", "str", None, "where the brokers register"),
          Key("group.id", "str", None, "the group, in ZooKeeper"))
    tuples = {"CONSUMER_KEYS": CONSUMER_KEYS, "ZK_CONSUMER_KEYS": zk}
    assert "[ZooKeeper consumer]: the group, in ZooKeeper" in ct.client_row("consumer", "group.id", "–", tuples)[3]
    row = ct.client_row("consumer", "auto.commit.enable", "true", tuples)
    assert row[3].startswith("honoured (as `enable.auto.commit`) [consumer]")
