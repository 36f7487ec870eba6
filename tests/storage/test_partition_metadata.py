"""``partition.metadata`` (KIP-516): Kafka's two-line format, written atomically; anything we
cannot read as version 0 with a 22-character id reads as no id (the loader then gives one)."""

from __future__ import annotations

import pytest

from appliance.storage.partition_metadata import (
    new_topic_id,
    parse_topic_id,
    read_topic_id,
    topic_id_text,
    write_topic_id,
)

ID = bytes.fromhex("7b0a3e5c1f2d4a6b8c9d0e1f2a3b4c5d")


def test_round_trip_in_kafkas_format(tmp_path):
    write_topic_id(str(tmp_path), ID)
    assert (tmp_path / "partition.metadata").read_text() == "version: 0\ntopic_id: ewo-XB8tSmuMnQ4fKjtMXQ\n"
    assert read_topic_id(str(tmp_path)) == ID
    assert not list(tmp_path.glob("*.tmp"))
    assert parse_topic_id(topic_id_text(ID)) == ID


def test_no_file_is_no_id(tmp_path):
    assert read_topic_id(str(tmp_path)) is None


@pytest.mark.parametrize("text", [
    "", "version: 1\ntopic_id: ewo-XB8tSmuMnQ4fKjtMXQ\n", "version: 0\n",
    "version: 0\ntopic_id: short\n", "version: 0\ntopic_id: !!!!!!!!!!!!!!!!!!!!!!\n",
    "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",  # the zero UUID means none
    "version: x\ntopic_id: ewo-XB8tSmuMnQ4fKjtMXQ\n", "\x00\x01garbage",
])
def test_unreadable_files_read_as_no_id(tmp_path, text):
    (tmp_path / "partition.metadata").write_text(text)
    assert read_topic_id(str(tmp_path)) is None


@pytest.mark.parametrize("text", ["", "abc", "ewo-XB8tSmuMnQ4fKjtMX", "ewo-XB8tSmuMnQ4fKjtMXQQ", "ewo+XB8tSmuMnQ4fKjtM=="])
def test_parse_refuses_bad_text(text):
    with pytest.raises(ValueError):
        parse_topic_id(text)


def test_new_ids_are_random_and_never_zero():
    ids = {new_topic_id() for _ in range(100)}
    assert len(ids) == 100 and bytes(16) not in ids
