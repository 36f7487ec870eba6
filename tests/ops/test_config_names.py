"""Kafka 0.8's key names and their modern twins, no-effect keys and suggestions (config.py alone)."""

from __future__ import annotations

import logging

import pytest

from appliance.config import KAFKA_ONLY_KEYS, NO_EFFECT, BrokerConfig, ConfigError


@pytest.mark.parametrize("given, listeners, advertised", [
    ({}, [("127.0.0.1", 9092)], [("127.0.0.1", 9092)]),
    ({"port": "9093"}, [("", 9093)], [("", 9093)]),
    ({"host.name": "10.0.0.5"}, [("10.0.0.5", 9092)], [("10.0.0.5", 9092)]),
    ({"port": "9093", "host.name": "127.0.0.1", "advertised.host.name": "kafka1"},
     [("127.0.0.1", 9093)], [("kafka1", 9093)]),
    ({"port": "9093", "advertised.port": "19093"}, [("", 9093)], [("", 19093)]),
    ({"listeners": "PLAINTEXT://127.0.0.1:9094", "port": "9094"}, [("127.0.0.1", 9094)], [("127.0.0.1", 9094)]),
    ({"listeners": "PLAINTEXT://h:1", "advertised.port": "2"}, [("h", 1)], [("h", 2)]),
])
def test_0_8_names_map_onto_listeners(given, listeners, advertised):
    c = BrokerConfig.load(overrides=given)
    assert c.listeners == listeners and c.advertised_listeners == advertised


@pytest.mark.parametrize("given, old, new", [
    ({"port": "9093", "listeners": "PLAINTEXT://127.0.0.1:9092"}, "port", "listeners"),
    ({"host.name": "a", "listeners": "PLAINTEXT://b:9092"}, "host.name", "listeners"),
    ({"advertised.port": "1", "advertised.listeners": "PLAINTEXT://x:2"}, "advertised.port", "advertised.listeners"),
    ({"advertised.host.name": "a", "advertised.listeners": "PLAINTEXT://x:2"},
     "advertised.host.name", "advertised.listeners"),
    ({"offsets.topic.retention.minutes": "5", "offsets.retention.minutes": "6"},
     "offsets.topic.retention.minutes", "offsets.retention.minutes"),
])
def test_twins_that_disagree_name_both(given, old, new):
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.load(overrides=given)
    msg = str(ei.value)
    assert old in msg and new in msg and given[old] in msg and given[new] in msg


def test_old_retention_name_takes_effect():
    assert BrokerConfig.load(overrides={"offsets.topic.retention.minutes": "5"})["offsets.retention.minutes"] == 5


def test_no_effect_keys_are_reported_once_set_away_from_default(caplog):
    with caplog.at_level(logging.WARNING):
        BrokerConfig.load(overrides={"num.io.threads": "16", "fetch.max.bytes": "57671680",
                                     "background.threads": "10", "num.replica.fetchers": "4"})
    text = caplog.text
    assert "num.io.threads=16 is accepted but has no effect here" in text
    assert "background.threads=10 is accepted but has no effect here" in text
    assert "num.replica.fetchers" not in text  # honoured: nothing to say
    assert "fetch.max.bytes" not in text  # honoured
    assert set(NO_EFFECT) and KAFKA_ONLY_KEYS
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        BrokerConfig.load(overrides={"num.io.threads": "8"})
    assert "num.io.threads" not in caplog.text  # given at its default: it asks for nothing


def test_unknown_key_suggestion(caplog):
    with caplog.at_level(logging.WARNING):
        c = BrokerConfig.load(overrides={"log.segment.byte": "1", "completely.different": "2"})
    assert "did you mean log.segment.bytes?" in caplog.text
    assert "completely.different" in caplog.text and caplog.text.count("did you mean") == 1
    assert c["log.segment.bytes"] == 1073741824  # the misspelled key changed nothing


def test_quiet_load_does_not_warn(caplog):
    with caplog.at_level(logging.WARNING):
        BrokerConfig.load(overrides={"num.io.threads": "16", "x.y": "1"}, warn=False)
    assert caplog.text == ""


def test_replica_socket_timeout_must_cover_the_long_poll():
    with pytest.raises(ConfigError) as ei:
        BrokerConfig.load(overrides={"replica.socket.timeout.ms": "400", "replica.fetch.wait.max.ms": "500"})
    assert "replica.socket.timeout.ms" in str(ei.value) and "replica.fetch.wait.max.ms" in str(ei.value)
    assert BrokerConfig.load(overrides={"connections.max.idle.ms": "-1"})["connections.max.idle.ms"] == -1
