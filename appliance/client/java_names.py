"""Kafka's class names for encoders and partitioners (``serializer.class``,
``key.serializer.class``, ``partitioner.class`` of the 0.8.2 producer, and the new producer's
serializer names), mapped to what does the same here.

A producer.properties file can only name a class; these names are the ones 0.8.2 ships. A name
not listed raises InvalidConfigError naming it and the accepted ones. Python objects (an Encoder,
a callable, a partitioner) given for the same keys are used as they are.
"""

from __future__ import annotations

from typing import Any

from appliance.client.java_hash import HashCodePartitioner
from appliance.client.serialization import DefaultEncoder, StringEncoder
from appliance.errors import InvalidConfigError

__all__ = ["NullEncoder", "ENCODER_NAMES", "PARTITIONER_NAMES", "encoder_named", "partitioner_named"]


class NullEncoder:
    """``kafka.serializer.NullEncoder``: every key (or value) becomes null."""

    def to_bytes(self, obj: Any) -> None:
        return None


# name -> what it does, for errors and docs
ENCODER_NAMES: dict[str, str] = {
    "kafka.serializer.DefaultEncoder": "bytes as they are (str as UTF-8)",
    "kafka.serializer.StringEncoder": "str encoded with serializer.encoding (default UTF8)",
    "kafka.serializer.NullEncoder": "always null",
    "org.apache.kafka.common.serialization.ByteArraySerializer": "bytes as they are",
    "org.apache.kafka.common.serialization.StringSerializer": "str as UTF-8",
}

PARTITIONER_NAMES: dict[str, str] = {
    "kafka.producer.DefaultPartitioner": "0.8.2: abs(Java hashCode of the key) % partitions",
    "kafka.producer.ByteArrayPartitioner": "0.8.2: abs(Arrays.hashCode(key bytes)) % partitions",
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner":
        "murmur2(key bytes) % partitions (the Java client's; this client's default)",
}


def encoder_named(name: str, encoding: str = "UTF8", *, key: str = "serializer.class") -> Any:
    """The Encoder a Kafka class ``name`` stands for. Raises InvalidConfigError naming ``key``,
    the name and the accepted names."""
    name = name.strip()
    if name in ("kafka.serializer.DefaultEncoder", "org.apache.kafka.common.serialization.ByteArraySerializer"):
        return DefaultEncoder()
    if name == "kafka.serializer.StringEncoder":
        try:
            "".encode(encoding)
        except LookupError:
            raise InvalidConfigError(f"config serializer.encoding={encoding!r}: unknown encoding") from None
        return StringEncoder(encoding)
    if name == "org.apache.kafka.common.serialization.StringSerializer":
        return StringEncoder()
    if name == "kafka.serializer.NullEncoder":
        return NullEncoder()
    raise InvalidConfigError(f"config {key}={name!r}: unknown encoder class; accepted: "
                             + ", ".join(ENCODER_NAMES))


def partitioner_named(name: str, refresh_interval_ms: int = 600_000) -> HashCodePartitioner | None:
    """The partitioner a Kafka class ``name`` stands for, None for the producer's own default
    (``refresh_interval_ms``: how long a null key's random partition is kept). Raises
    InvalidConfigError naming the name and the accepted names."""
    name = name.strip()
    if name in ("kafka.producer.DefaultPartitioner", "kafka.producer.ByteArrayPartitioner"):
        # ByteArrayPartitioner hashed byte keys with Arrays.hashCode: what the hashCode
        # partitioner does for bytes (it hashes str keys as String.hashCode besides)
        return HashCodePartitioner(refresh_interval_ms)
    if name == "org.apache.kafka.clients.producer.internals.DefaultPartitioner":
        return None
    raise InvalidConfigError(f"config partitioner.class={name!r}: unknown partitioner class; accepted: "
                             + ", ".join(PARTITIONER_NAMES))
