"""The consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups. Field lists follow Kafka's
clients/src/main/resources/common/message/*.json, restricted to the versions we advertise; flexible versions (KIP-482) are derived from FLEXIBLE."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import (
    Array,
    Boolean,
    Bytes,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
)

__all__ = ["FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch", "DescribeGroups", "ListGroups", "DeleteGroups", "OffsetDelete"]


class FindCoordinator(ApiMessage):
    """FindCoordinator (key 10); Kafka: valid 0-6, flexible 3+. v4 batches several keys per
    request (KIP-699); v5 only adds TRANSACTION_ABORTABLE (KIP-890) and v6 share groups
    (KIP-932), neither served, so we stop at 4."""

    API_KEY, MIN_VERSION, MAX_VERSION = 10, 0, 4
    FLEXIBLE = "3+"
    REQUEST = (
        Field("key", String, versions="0-3"),
        Field("key_type", Int8, versions="1+"),
        Field("coordinator_keys", Array(String), versions="4+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("error_code", Int16, versions="0-3"),
        Field("error_message", NullableString, versions="1-3"),
        Field("node_id", Int32, versions="0-3"),
        Field("host", String, versions="0-3"),
        Field("port", Int32, versions="0-3"),
        Field("coordinators", Array(Struct(
            Field("key", String),
            Field("node_id", Int32),
            Field("host", String),
            Field("port", Int32),
            Field("error_code", Int16),
            Field("error_message", NullableString),
        )), versions="4+"),
    )


class JoinGroup(ApiMessage):
    """JoinGroup (key 11); Kafka: valid 0-9, flexible 6+. v7 answers the protocol type, v8
    carries the member's reason for joining (KIP-800), v9 the skip-assignment flag (KRaft's
    static-member leaders; always false here)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 11, 0, 9
    FLEXIBLE = "6+"
    REQUEST = (
        Field("group_id", String),
        Field("session_timeout_ms", Int32),
        Field("rebalance_timeout_ms", Int32, versions="1+", default=-1),
        Field("member_id", String),
        Field("group_instance_id", NullableString, versions="5+"),
        Field("protocol_type", String),
        Field("protocols", Array(Struct(
            Field("name", String),
            Field("metadata", Bytes),
        ))),
        Field("reason", NullableString, versions="8+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="2+"),
        Field("error_code", Int16),
        Field("generation_id", Int32, default=-1),
        Field("protocol_type", NullableString, versions="7+"),
        Field("protocol_name", String, nullable="7+"),
        Field("leader", String),
        Field("skip_assignment", Boolean, versions="9+"),
        Field("member_id", String),
        Field("members", Array(Struct(
            Field("member_id", String),
            Field("group_instance_id", NullableString, versions="5+"),
            Field("metadata", Bytes),
        ))),
    )


class SyncGroup(ApiMessage):
    """SyncGroup (key 14); Kafka: valid 0-5, flexible 4+. v5 names the protocol type and name
    both ways (KIP-559)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 14, 0, 5
    FLEXIBLE = "4+"
    REQUEST = (
        Field("group_id", String),
        Field("generation_id", Int32),
        Field("member_id", String),
        Field("group_instance_id", NullableString, versions="3+"),
        Field("protocol_type", NullableString, versions="5+"),
        Field("protocol_name", NullableString, versions="5+"),
        Field("assignments", Array(Struct(
            Field("member_id", String),
            Field("assignment", Bytes),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("error_code", Int16),
        Field("protocol_type", NullableString, versions="5+"),
        Field("protocol_name", NullableString, versions="5+"),
        Field("assignment", Bytes),
    )


class Heartbeat(ApiMessage):
    """Heartbeat (key 12); Kafka: valid 0-4, flexible 4+. v3 adds the static member id."""

    API_KEY, MIN_VERSION, MAX_VERSION = 12, 0, 4
    FLEXIBLE = "4+"
    REQUEST = (
        Field("group_id", String),
        Field("generation_id", Int32),
        Field("member_id", String),
        Field("group_instance_id", NullableString, versions="3+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("error_code", Int16),
    )


class LeaveGroup(ApiMessage):
    """LeaveGroup (key 13); Kafka: valid 0-5, flexible 4+. v3 (KIP-345) leaves a batch of
    members, each answered with its own error; v5 adds each member's reason (KIP-800)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 13, 0, 5
    FLEXIBLE = "4+"
    REQUEST = (
        Field("group_id", String),
        Field("member_id", String, versions="0-2"),
        Field("members", Array(Struct(
            Field("member_id", String),
            Field("group_instance_id", NullableString),
            Field("reason", NullableString, versions="5+"),
        )), versions="3+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("error_code", Int16),
        Field("members", Array(Struct(
            Field("member_id", String),
            Field("group_instance_id", NullableString),
            Field("error_code", Int16),
        )), versions="3+"),
    )


class OffsetCommit(ApiMessage):
    """OffsetCommit (key 8); Kafka: valid 2-10, flexible 8+. v5 drops the retention time, v6
    adds the committed leader epoch, v7 the static member id."""

    API_KEY, MIN_VERSION, MAX_VERSION = 8, 0, 8
    FLEXIBLE = "8+"
    REQUEST = (
        Field("group_id", String),
        Field("generation_id_or_member_epoch", Int32, versions="1+", default=-1),
        Field("member_id", String, versions="1+"),
        Field("group_instance_id", NullableString, versions="7+"),
        Field("retention_time_ms", Int64, versions="2-4", default=-1),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("committed_offset", Int64),
                Field("committed_leader_epoch", Int32, versions="6+", default=-1),
                Field("commit_timestamp", Int64, versions="1", default=-1),
                Field("committed_metadata", NullableString),
            ))),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="3+"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
            ))),
        ))),
    )


class OffsetFetch(ApiMessage):
    """OffsetFetch (key 9); Kafka: valid 1-10, flexible 6+. v5 answers the committed leader
    epoch, v7 asks for stable offsets only (KIP-447: no transactions here, so every offset is
    stable); v8 fetches several groups at once (KIP-709). v9's member id and epoch belong to
    the new consumer protocol (KIP-848), not served: we stop at 8."""

    API_KEY, MIN_VERSION, MAX_VERSION = 9, 0, 8
    FLEXIBLE = "6+"
    REQUEST = (
        Field("group_id", String, versions="0-7"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partition_indexes", Array(Int32)),
        )), versions="0-7", nullable="2-7"),
        Field("groups", Array(Struct(
            Field("group_id", String),
            Field("topics", Array(Struct(
                Field("name", String),
                Field("partition_indexes", Array(Int32)),
            )), nullable=True),
        )), versions="8+"),
        Field("require_stable", Boolean, versions="7+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="3+"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("committed_offset", Int64),
                Field("committed_leader_epoch", Int32, versions="5+", default=-1),
                Field("metadata", NullableString),
                Field("error_code", Int16),
            ))),
        )), versions="0-7"),
        Field("error_code", Int16, versions="2-7"),
        Field("groups", Array(Struct(
            Field("group_id", String),
            Field("topics", Array(Struct(
                Field("name", String),
                Field("partitions", Array(Struct(
                    Field("partition_index", Int32),
                    Field("committed_offset", Int64),
                    Field("committed_leader_epoch", Int32, default=-1),
                    Field("metadata", NullableString),
                    Field("error_code", Int16),
                ))),
            ))),
            Field("error_code", Int16),
        )), versions="8+"),
    )


class DescribeGroups(ApiMessage):
    """DescribeGroups (key 15); Kafka: valid 0-6, flexible 5+. v4 adds each member's static id."""

    API_KEY, MIN_VERSION, MAX_VERSION = 15, 0, 5
    FLEXIBLE = "5+"
    REQUEST = (
        Field("groups", Array(String)),
        Field("include_authorized_operations", Boolean, versions="3+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("groups", Array(Struct(
            Field("error_code", Int16),
            Field("group_id", String),
            Field("group_state", String),
            Field("protocol_type", String),
            Field("protocol_data", String),
            Field("members", Array(Struct(
                Field("member_id", String),
                Field("group_instance_id", NullableString, versions="4+"),
                Field("client_id", String),
                Field("client_host", String),
                Field("member_metadata", Bytes),
                Field("member_assignment", Bytes),
            ))),
            Field("authorized_operations", Int32, versions="3+", default=-2147483648),
        ))),
    )


class ListGroups(ApiMessage):
    """ListGroups (key 16); Kafka: valid 0-5, flexible 3+. v4 filters by state (KIP-518) and
    answers each group's state; v5's type filter (KIP-848) is not served."""

    API_KEY, MIN_VERSION, MAX_VERSION = 16, 0, 4
    FLEXIBLE = "3+"
    REQUEST = (
        Field("states_filter", Array(String), versions="4+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("error_code", Int16),
        Field("groups", Array(Struct(
            Field("group_id", String),
            Field("protocol_type", String),
            Field("group_state", String, versions="4+"),
        ))),
    )


class DeleteGroups(ApiMessage):
    """DeleteGroups (key 42); Kafka: valid 0-2, flexible 2+. Used by consumer-groups --delete."""

    API_KEY, MIN_VERSION, MAX_VERSION = 42, 0, 2
    FLEXIBLE = "2+"
    REQUEST = (
        Field("groups_names", Array(String)),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results", Array(Struct(
            Field("group_id", String),
            Field("error_code", Int16),
        ))),
    )


class OffsetDelete(ApiMessage):
    """OffsetDelete (key 47, KIP-496); Kafka: valid 0 (kafka-python and librdkafka send v0)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 47, 0, 0
    REQUEST = (
        Field("group_id", String),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
            ))),
        ))),
    )
    RESPONSE = (
        Field("error_code", Int16),
        Field("throttle_time_ms", Int32),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
            ))),
        ))),
    )
