"""ElectLeaders (KIP-183, KIP-460): an admin API every broker advertises. The controller
answers it in a cluster; a standalone broker, the one replica of every partition, answers as a
one-broker Kafka cluster does (no election is ever needed)."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Int8, Int16, Int32, NullableString, String

__all__ = ["ElectLeaders"]


class ElectLeaders(ApiMessage):
    """ElectLeaders (key 43); Kafka: valid 0-2, flexible 2+. v1 adds the election type
    (0 preferred, 1 unclean; KIP-460) and a top-level error code. Null topic_partitions = all."""

    API_KEY, MIN_VERSION, MAX_VERSION = 43, 0, 1
    FLEXIBLE = "2+"  # Kafka's; v2 (the first flexible version) is not served
    REQUEST = (
        Field("election_type", Int8, "1+"),
        Field("topic_partitions", Array(Struct(
            Field("topic", String),
            Field("partitions", Array(Int32)),
        )), nullable=True),
        Field("timeout_ms", Int32, default=60000),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16, "1+"),
        Field("replica_election_results", Array(Struct(
            Field("topic", String),
            Field("partition_result", Array(Struct(
                Field("partition_id", Int32),
                Field("error_code", Int16),
                Field("error_message", NullableString),
            ))),
        ))),
    )
