"""The admin APIs that act on a partition's log: DeleteRecords and AlterReplicaLogDirs.
Field lists follow Kafka's clients/src/main/resources/common/message/*.json, restricted to the
versions Kafka 3.x serves (v2 of both is flexible, KIP-482)."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Int16, Int32, Int64, String

__all__ = ["DeleteRecords", "AlterReplicaLogDirs"]


class DeleteRecords(ApiMessage):
    """DeleteRecords (key 21); Kafka: valid 0-2, flexible 2+. v1 only marks throttling as
    applied after the response (KIP-219); the fields are v0's. Offset -1 = the high watermark."""

    API_KEY, MIN_VERSION, MAX_VERSION = 21, 0, 2
    FLEXIBLE = "2+"
    REQUEST = (
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("offset", Int64),
            ))),
        ))),
        Field("timeout_ms", Int32, default=30000),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("low_watermark", Int64),
                Field("error_code", Int16),
            ))),
        ))),
    )


class AlterReplicaLogDirs(ApiMessage):
    """AlterReplicaLogDirs (key 34); Kafka 2.x: valid 0-1 (v1 as v0, KIP-219), flexible 2+.
    Moves each named partition into the log dir ``path``."""

    API_KEY, MIN_VERSION, MAX_VERSION = 34, 0, 2
    FLEXIBLE = "2+"
    REQUEST = (
        Field("dirs", Array(Struct(
            Field("path", String),
            Field("topics", Array(Struct(
                Field("name", String),
                Field("partitions", Array(Int32)),
            ))),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results", Array(Struct(
            Field("topic_name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
            ))),
        ))),
    )
