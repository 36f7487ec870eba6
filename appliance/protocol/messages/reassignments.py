"""The KIP-455 reassignment APIs: AlterPartitionReassignments (45) and
ListPartitionReassignments (46): admin APIs every broker advertises. The controller answers
them in a cluster; a standalone broker answers as a one-broker Kafka cluster does.

Field lists follow Kafka's AlterPartitionReassignments{Request,Response}.json and
ListPartitionReassignments{Request,Response}.json (both flexible from v0).
"""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Boolean, Int16, Int32, NullableString, String

__all__ = ["AlterPartitionReassignments", "ListPartitionReassignments"]


class AlterPartitionReassignments(ApiMessage):
    """AlterPartitionReassignments (key 45); Kafka: valid 0-1, flexible 0+. v1 adds
    allow_replication_factor_change (KIP-860). A null replica list cancels the partition's
    reassignment in progress."""

    API_KEY, MIN_VERSION, MAX_VERSION = 45, 0, 1
    FLEXIBLE = "0+"
    REQUEST = (
        Field("timeout_ms", Int32, default=60000),
        Field("allow_replication_factor_change", Boolean, "1+", default=True),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("replicas", Array(Int32), nullable=True, default=None),
            ))),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("allow_replication_factor_change", Boolean, "1+", default=True),
        Field("error_code", Int16),
        Field("error_message", NullableString, default=None),
        Field("responses", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
                Field("error_message", NullableString, default=None),
            ))),
        ))),
    )


class ListPartitionReassignments(ApiMessage):
    """ListPartitionReassignments (key 46); Kafka: valid 0, flexible 0+. Null topics = every
    reassignment in progress."""

    API_KEY, MIN_VERSION, MAX_VERSION = 46, 0, 0
    FLEXIBLE = "0+"
    REQUEST = (
        Field("timeout_ms", Int32, default=60000),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partition_indexes", Array(Int32)),
        )), nullable=True, default=None),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
        Field("error_message", NullableString, default=None),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("replicas", Array(Int32)),
                Field("adding_replicas", Array(Int32)),
                Field("removing_replicas", Array(Int32)),
            ))),
        ))),
    )
