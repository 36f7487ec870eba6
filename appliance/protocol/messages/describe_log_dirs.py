"""DescribeLogDirs (key 35): per log dir its error and the size of each partition it holds.
Kafka's DescribeLogDirsRequest/Response.json: valid 0-4, flexible 2+; v1 only changes
throttling, v3 adds a top-level error code, v4 each dir's total and usable bytes (KIP-827)."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Boolean, Int16, Int32, Int64, String

__all__ = ["DescribeLogDirs"]


class DescribeLogDirs(ApiMessage):
    """DescribeLogDirs (key 35). ``topics`` null asks for every partition."""

    API_KEY, MIN_VERSION, MAX_VERSION = 35, 0, 4
    FLEXIBLE = "2+"
    REQUEST = (
        Field("topics", Array(Struct(
            Field("topic", String),
            Field("partitions", Array(Int32)),
        )), nullable=True),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16, versions="3+"),
        Field("results", Array(Struct(
            Field("error_code", Int16),
            Field("log_dir", String),
            Field("topics", Array(Struct(
                Field("name", String),
                Field("partitions", Array(Struct(
                    Field("partition_index", Int32),
                    Field("partition_size", Int64),
                    Field("offset_lag", Int64),
                    Field("is_future_key", Boolean),
                ))),
            ))),
            Field("total_bytes", Int64, versions="4+", default=-1),
            Field("usable_bytes", Int64, versions="4+", default=-1),
        ))),
    )
