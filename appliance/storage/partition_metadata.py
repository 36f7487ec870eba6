"""A partition directory's ``partition.metadata``: the topic id (KIP-516), kept beside the
segments so that a restarted broker answers the same id for the same topic, and a topic deleted
and created again under its old name gets a new one.

Kafka's format, two lines::

    version: 0
    topic_id: <the id in URL-safe base64 without padding, as Kafka's Uuid.toString>
"""

from __future__ import annotations

import base64
import os
import uuid

__all__ = ["PARTITION_METADATA_FILE", "read_topic_id", "write_topic_id", "new_topic_id",
           "topic_id_text", "parse_topic_id"]

PARTITION_METADATA_FILE = "partition.metadata"
_VERSION = 0
_ZERO = bytes(16)


def new_topic_id() -> bytes:
    """A fresh random id, never the zero UUID (Kafka's "none")."""
    while True:
        raw = uuid.uuid4().bytes
        if raw != _ZERO:
            return raw


def topic_id_text(topic_id: bytes) -> str:
    """Kafka's text form of an id: 22 characters of URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


def parse_topic_id(text: str) -> bytes:
    """The 16 bytes of an id in Kafka's text form. Raises ValueError."""
    text = text.strip()
    if len(text) != 22:
        raise ValueError(f"a topic id is 22 base64 characters, not {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError) as e:
        raise ValueError(f"bad topic id {text!r}: {e}") from e
    if len(raw) != 16:
        raise ValueError(f"bad topic id {text!r}")
    return raw


def read_topic_id(part_dir: str) -> bytes | None:
    """The id saved in ``part_dir`` (None: no file, or one we cannot read as version 0)."""
    try:
        with open(os.path.join(part_dir, PARTITION_METADATA_FILE), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        if int(fields.get("version", "-1")) != _VERSION:
            return None
        raw = parse_topic_id(fields.get("topic_id", ""))
    except ValueError:
        return None
    return raw if raw != _ZERO else None


def write_topic_id(part_dir: str, topic_id: bytes, sync: bool = True) -> None:
    """Save ``topic_id`` atomically (a crash leaves the old file or the new one; the loader
    removes a leftover ``.tmp``). ``sync=False``: the caller fsyncs the file and dir later."""
    path = os.path.join(part_dir, PARTITION_METADATA_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"version: {_VERSION}\ntopic_id: {topic_id_text(topic_id)}\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
