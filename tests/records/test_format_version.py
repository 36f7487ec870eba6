"""Kafka's message format version names and the magic each means."""

from __future__ import annotations

import pytest

from appliance.records.format_version import (
    LATEST,
    check_format_version,
    magic_of,
    parse_format_version,
)


@pytest.mark.parametrize("value,canonical,magic", [
    ("0.8.0", "0.8.0", 0), ("0.8.2", "0.8.2", 0), ("0.8.2.2", "0.8.2", 0), ("0.9.0", "0.9.0", 0),
    ("0.9.0.1", "0.9.0", 0), ("0.10.0-IV0", "0.10.0-IV0", 0), ("0.10.0-IV1", "0.10.0-IV1", 1),
    ("0.10.0", "0.10.0-IV1", 1), ("0.10.1", "0.10.1-IV2", 1), ("0.10.2.1", "0.10.2-IV0", 1),
    ("0.11.0", "0.11.0-IV2", 2), ("1.0", "1.0-IV0", 2), ("2.0.1", "2.0-IV1", 2), ("2.8-IV0", "2.8-IV0", 2),
    ("3.0", "3.0-IV1", 2), (" 2.4 ", "2.4-IV1", 2),
])
def test_kafka_names_parse_to_their_magic(value, canonical, magic):
    assert parse_format_version(value) == (canonical, magic)
    assert magic_of(value) == magic and check_format_version(value) is None


@pytest.mark.parametrize("bad", ["", "0.7", "0.8", "0.10", "0.10.3", "3.1", "4.0", "2.8-IV9", "latest", "v2"])
def test_other_values_refused_naming_the_value(bad):
    with pytest.raises(ValueError, match="is not a Kafka version"):
        parse_format_version(bad)
    assert repr(bad) in check_format_version(bad)


def test_latest_is_kafka_3_0():
    assert LATEST == "3.0-IV1" and magic_of(LATEST) == 2
