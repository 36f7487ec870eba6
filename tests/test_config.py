"""appliance.config: .properties parsing, typed defaults, validation, topic synonyms."""

from __future__ import annotations

import logging

import pytest

from appliance.config import (
    BROKER_KEYS,
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    TopicConfig,
    parse_properties,
    render_server_properties,
)
from appliance.errors import ErrorCode


def test_parse_properties_syntax():
    text = "\n".join([
        "# comment",
        "! another comment",
        "   ",
        "a=1",
        "b : two",
        "c three four",
        "  d=  spaced value  ",
        "e=line one \\",
        "    continued",
        "f=tab\\there\\nnewline \\u0041 back\\\\slash",
        "key\\ with\\ spaces=x",
        "g=ends with backslash\\\\",
        "h=",
        "a=override",
    ])
    p = parse_properties(text)
    assert p["a"] == "override"
    assert p["b"] == "two"
    assert p["c"] == "three four"
    assert p["d"] == "spaced value  "
    assert p["e"] == "line one continued"
    assert p["f"] == "tab\there\nnewline A back\\slash"
    assert p["key with spaces"] == "x"
    assert p["g"] == "ends with backslash\\"
    assert p["h"] == ""
    assert "# comment" not in p and len(p) == 9


def test_defaults_are_kafkas():
    c = BrokerConfig.load()
    assert c["broker.id"] == 0
    assert c["num.network.threads"] == 2
    assert c["message.max.bytes"] == 1048588
    assert c["log.segment.bytes"] == 1 << 30
    assert c["offsets.topic.num.partitions"] == 50
    assert c["log.flush.interval.messages"] == LONG_MAX
    assert c.log_dirs == ["./data"]
    assert c.listeners == [("127.0.0.1", 9092)]
    assert c.standalone
    t = c.topic_defaults()
    assert t.retention_ms == 168 * 3600_000 and t.segment_ms == 168 * 3600_000
    assert t.flush_ms == LONG_MAX and t.segment_jitter_ms == 0
    assert t["cleanup.policy"] == ["delete"] and t.max_message_bytes == 1048588
    assert t.to_properties() == {}


def test_file_and_overrides(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text("log.dirs=/a, /b\nlog.dir=/ignored\nlisteners=PLAINTEXT://:9093,SSL://[::1]:9094\n"
                 "log.retention.minutes=30\nnum.partitions=4\n")
    c = BrokerConfig.load(str(p), {"num.partitions": "8"})
    assert c.log_dirs == ["/a", "/b"]  # log.dirs wins over log.dir
    assert c.listeners == [("", 9093), ("::1", 9094)]
    assert c["num.partitions"] == 8
    assert c.topic_defaults().retention_ms == 30 * 60_000  # minutes win over hours
    c = BrokerConfig.load(overrides={"log.retention.ms": "5", "log.retention.minutes": "30"})
    assert c.topic_defaults().retention_ms == 5  # ms wins over minutes
    c = BrokerConfig.load(overrides={"log.retention.hours": "-1"})
    assert c.topic_defaults().retention_ms == -1
    c = BrokerConfig.load(overrides={"log.roll.hours": "2", "log.flush.interval.ms": "700"})
    assert c.topic_defaults().segment_ms == 7200_000 and c.topic_defaults().flush_ms == 700


@pytest.mark.parametrize("key,value", [
    ("log.segment.bytes", "abc"),
    ("num.partitions", "0"),
    ("log.retention.hours", "-5"),
    ("log.cleanup.policy", "delete,shred"),
    ("auto.create.topics.enable", "yes"),
    ("broker.id", "99999999999"),
    ("listeners", "localhost:9092"),
    ("log.cleaner.min.cleanable.ratio", "1.5"),
    ("log.writeback.mode", "sometimes"),
])
def test_bad_values_name_key_and_value(key, value):
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.load(overrides={key: value})
    e = ei.value
    assert e.key == key and e.value == value
    assert key in str(e) and repr(value) in str(e)
    assert e.code == ErrorCode.INVALID_CONFIG


def test_unknown_broker_key_warns(caplog):
    with caplog.at_level(logging.WARNING):
        c = BrokerConfig.load(overrides={"no.such.key": "1"})
    assert "no.such.key" in caplog.text
    assert c.get("no.such.key") == "1"


def test_topic_overrides():
    b = BrokerConfig.load(overrides={"log.segment.bytes": "2048"})
    t = TopicConfig.from_overrides(b, {"retention.ms": "1000", "cleanup.policy": "compact,delete"})
    assert t.segment_bytes == 2048  # from the broker key
    assert t.retention_ms == 1000 and t["cleanup.policy"] == ["compact", "delete"]
    assert t.to_properties() == {"retention.ms": "1000", "cleanup.policy": "compact,delete"}
    with pytest.raises(ConfigError, match="segment.bytes"):
        TopicConfig.from_overrides(b, {"segment.bytes": "10"})
    with pytest.raises(ConfigError, match="unknown topic configuration key"):
        TopicConfig.from_overrides(b, {"log.segment.bytes": "4096"})
    with pytest.raises(ConfigError, match="message.timestamp.type"):
        TopicConfig.from_overrides(b, {"message.timestamp.type": "Whenever"})
    with pytest.raises(AttributeError):
        t.retention_ms = 5


def test_server_properties_file_matches_table():
    import pathlib
    text = (pathlib.Path(__file__).parent.parent / "config" / "server.properties").read_text()
    assert text == render_server_properties()
    parsed = parse_properties(text)
    c = BrokerConfig.load(overrides=parsed)
    for k in BROKER_KEYS:
        assert c[k.name] == k.default


# --- listeners: names, security protocols, the inter-broker listener ----------------------------

_TWO = {"listeners": "INTERNAL://127.0.0.1:9101,EXTERNAL://:9102",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT"}


def test_listeners_are_named_endpoints_with_their_protocol():
    c = BrokerConfig.load(overrides={**_TWO, "advertised.listeners": "external://kafka.example:19102",
                                     "inter.broker.listener.name": "internal"})
    assert [(e.listener, e.host, e.port, e.security_protocol) for e in c.listener_endpoints] == [
        ("INTERNAL", "127.0.0.1", 9101, "PLAINTEXT"), ("EXTERNAL", "", 9102, "PLAINTEXT")]
    # a listener left out of advertised.listeners is advertised as it listens
    assert [str(e) for e in c.advertised_endpoints] == ["INTERNAL://127.0.0.1:9101",
                                                        "EXTERNAL://kafka.example:19102"]
    assert c.inter_broker_listener == "INTERNAL"
    assert c.listeners == [("127.0.0.1", 9101), ("", 9102)]  # the (host, port) view stays


def test_default_listener_and_inter_broker_listener_are_kafkas():
    c = BrokerConfig.load()
    assert [str(e) for e in c.listener_endpoints] == ["PLAINTEXT://127.0.0.1:9092"]
    assert c.listener_endpoints[0].security_protocol == "PLAINTEXT"
    assert c.inter_broker_listener == "PLAINTEXT"
    c.check_served()
    # without inter.broker.listener.name: the first listener of security.inter.broker.protocol
    assert BrokerConfig.load(overrides=_TWO).inter_broker_listener == "INTERNAL"
    c = BrokerConfig.load(overrides={"port": "9093", "advertised.host.name": "k1"})
    assert [str(e) for e in c.advertised_endpoints] == ["PLAINTEXT://k1:9093"]  # 0.8 names


def test_ipv6_endpoint_is_written_back_in_brackets():
    c = BrokerConfig.load(overrides={"listeners": "PLAINTEXT://[::1]:9092"})
    assert c.listener_endpoints[0].host == "::1" and str(c.listener_endpoints[0]) == "PLAINTEXT://[::1]:9092"


@pytest.mark.parametrize("given, key, words", [
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listeners", ["PLAINTEXT appears twice"]),
    ({"listeners": "PLAINTEXT://a:1,SSL://b:1"}, "listeners", ["port 1 is used by two listeners"]),
    ({"listeners": "INTERNAL://:1"}, "listeners", ["INTERNAL", "listener.security.protocol.map"]),
    ({"listeners": "PLAINTEXT//:1"}, "listeners", ["is not NAME://host:port"]),
    ({"listeners": "PLAINTEXT://h:99999"}, "listeners", ["99999"]),
    ({**_TWO, "advertised.listeners": "OTHER://h:1"}, "advertised.listeners", ["OTHER"]),
    ({**_TWO, "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,OTHER:PLAINTEXT",
      "advertised.listeners": "OTHER://h:1"}, "advertised.listeners", ["OTHER", "not among listeners"]),
    ({**_TWO, "inter.broker.listener.name": "REPLICATION"}, "inter.broker.listener.name",
     ["REPLICATION", "not among listeners"]),
    ({**_TWO, "inter.broker.listener.name": "INTERNAL", "security.inter.broker.protocol": "PLAINTEXT"},
     "inter.broker.listener.name", ["give only one"]),
    ({"listeners": "SSL://:1"}, "security.inter.broker.protocol", ["no listener uses"]),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "listener.security.protocol.map",
     ["not LISTENER_NAME:SECURITY_PROTOCOL"]),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map",
     ["unknown security protocol 'TLS'"]),
    ({"listener.security.protocol.map": "A:SSL,a:SSL"}, "listener.security.protocol.map", ["mapped twice"]),
    ({"security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol", []),
])
def test_listener_mistakes_name_the_key_and_value(given, key, words):
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.load(overrides=given)
    assert ei.value.key == key
    msg = str(ei.value)
    assert key in msg and str(given.get(key, "")) in msg
    for w in words:
        assert w in msg


@pytest.mark.parametrize("proto", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_listener_not_plaintext_loads_but_is_not_served(proto):
    # valid Kafka configuration, so it loads; start-up refuses it rather than serve plaintext
    c = BrokerConfig.load(overrides={"listeners": "PLAINTEXT://:9092,SECURE://:9093",
                                     "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,SECURE:{proto}"})
    with pytest.raises(ConfigError) as ei:
        c.check_served()
    assert "SECURE" in str(ei.value) and proto in str(ei.value) and "not serve" in str(ei.value)
