"""Kafka's message format versions (``message.format.version`` / ``log.message.format.version``):
the names Kafka 0.8.0 ... 3.0 accept and the record magic each one means.

Kafka parses a version by its leading segments (three for 0.x, two from 1.0: "0.10.2.1" is
"0.10.2", "2.8.1" is "2.8"); a bare release name means its last internal version ("0.10.0" =
"0.10.0-IV1"). Magic 0 up to 0.10.0-IV0, magic 1 up to 0.10.2, RecordBatch v2 (magic 2) from
0.11.0. Pure data and functions; thread-safe.
"""

from __future__ import annotations

__all__ = ["FORMAT_VERSIONS", "LATEST", "parse_format_version", "magic_of", "check_format_version"]

# every internal version Kafka 3.0's ApiVersion lists, oldest first, with its record magic
_IVS: tuple[tuple[str, int], ...] = (
    ("0.8.0", 0), ("0.8.1", 0), ("0.8.2", 0), ("0.9.0", 0),
    ("0.10.0-IV0", 0), ("0.10.0-IV1", 1), ("0.10.1-IV0", 1), ("0.10.1-IV1", 1), ("0.10.1-IV2", 1),
    ("0.10.2-IV0", 1),
    ("0.11.0-IV0", 2), ("0.11.0-IV1", 2), ("0.11.0-IV2", 2), ("1.0-IV0", 2), ("1.1-IV0", 2),
    ("2.0-IV0", 2), ("2.0-IV1", 2), ("2.1-IV0", 2), ("2.1-IV1", 2), ("2.1-IV2", 2),
    ("2.2-IV0", 2), ("2.2-IV1", 2), ("2.3-IV0", 2), ("2.3-IV1", 2), ("2.4-IV0", 2), ("2.4-IV1", 2),
    ("2.5-IV0", 2), ("2.6-IV0", 2), ("2.7-IV0", 2), ("2.7-IV1", 2), ("2.7-IV2", 2),
    ("2.8-IV0", 2), ("2.8-IV1", 2), ("3.0-IV0", 2), ("3.0-IV1", 2),
)


def _with_release_names() -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for name, magic in _IVS:
        out[name] = (name, magic)
        release = name.split("-", 1)[0]
        out[release] = (name, magic)  # later internal versions overwrite: a release = its last IV
    return out


FORMAT_VERSIONS: dict[str, tuple[str, int]] = _with_release_names()
LATEST = _IVS[-1][0]


def parse_format_version(value: str) -> tuple[str, int]:
    """(canonical internal version, record magic) of a Kafka version string.

    Raises ValueError naming the value when Kafka would refuse it."""
    text = value.strip()
    segments = text.split(".")
    key = ".".join(segments[:3] if text.startswith("0.") else segments[:2])
    try:
        return FORMAT_VERSIONS[key]
    except KeyError:
        raise ValueError(
            f"{value!r} is not a Kafka version (0.8.0 ... {LATEST.split('-')[0]}, e.g. 0.10.2 or 2.8-IV1)") from None


def magic_of(value: str) -> int:
    """The record magic a message format version means (ValueError if it is not one)."""
    return parse_format_version(value)[1]


def check_format_version(value: object) -> str | None:
    """A config validator: None when ``value`` is a Kafka version, else the reason."""
    try:
        parse_format_version(str(value))
    except ValueError as e:
        return str(e)
    return None
