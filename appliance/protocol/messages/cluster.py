"""The inter-broker APIs of cluster mode: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6),
ControlledShutdown (7), OffsetsForLeaderEpoch (23), and their table. (The admin APIs the
controller answers, ElectLeaders (43) and the reassignment APIs (45, 46), are client APIs every
broker advertises: :mod:`.elect_leaders`, :mod:`.reassignments`.)

Field lists follow Kafka's clients/src/main/resources/common/message/*.json, restricted to the
versions Kafka 2.x's ZooKeeper-era brokers exchange plus the first flexible version of each
(same fields; our own controller and fetcher send the non-flexible ones). They are *not* in
``messages.__all__`` and so not in ``API_BY_KEY`` / ApiVersions: a standalone broker does not
serve them (librdkafka would start using OffsetsForLeaderEpoch the moment it is advertised).
The cluster integration looks them up in :data:`INTER_BROKER_APIS` (or through
``registry.inter_broker_api_for_key``) and advertises them when it serves them.
"""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import (
    Array,
    Boolean,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
)

__all__ = [
    "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown", "OffsetsForLeaderEpoch",
    "INTER_BROKER_APIS",
]


def _leader_and_isr_partition(ungrouped: bool) -> Struct:
    """LeaderAndIsrPartitionState: v0-1 list each partition with its topic name (ungrouped),
    v2+ group partitions under their topic, so the topic name is absent there."""
    head = (Field("topic_name", String, "0-1"),) if ungrouped else ()
    tail = () if ungrouped else (
        Field("adding_replicas", Array(Int32), "3+"),
        Field("removing_replicas", Array(Int32), "3+"),
    )
    return Struct(
        *head,
        Field("partition_index", Int32),
        Field("controller_epoch", Int32),
        Field("leader", Int32),
        Field("leader_epoch", Int32),
        Field("isr", Array(Int32)),
        Field("zk_version", Int32),
        Field("replicas", Array(Int32)),
        *tail,
        Field("is_new", Boolean, "1+", default=False),
    )


class LeaderAndIsr(ApiMessage):
    """LeaderAndIsr (key 4); Kafka: valid 0-5, flexible 4+. v1 adds is_new; v2 adds the broker
    epoch and groups partitions by topic; v3 adds adding/removing replicas (KIP-455); v4 is v3
    made flexible (v5's topic ids are not kept here)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 4, 0, 4
    FLEXIBLE = "4+"
    REQUEST = (
        Field("controller_id", Int32),
        Field("controller_epoch", Int32),
        Field("broker_epoch", Int64, "2+", default=-1),
        Field("ungrouped_partition_states", Array(_leader_and_isr_partition(True)), "0-1"),
        Field("topic_states", Array(Struct(
            Field("topic_name", String),
            Field("partition_states", Array(_leader_and_isr_partition(False))),
        )), "2+"),
        Field("live_leaders", Array(Struct(
            Field("broker_id", Int32),
            Field("host_name", String),
            Field("port", Int32),
        ))),
    )
    RESPONSE = (
        Field("error_code", Int16),
        Field("partition_errors", Array(Struct(
            Field("topic_name", String),
            Field("partition_index", Int32),
            Field("error_code", Int16),
        ))),
    )


class StopReplica(ApiMessage):
    """StopReplica (key 5); Kafka: valid 0-3, flexible 2+. v1 adds the broker epoch and groups
    partitions by topic; v2 is v1 made flexible (v3 regroups partition states: not served)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 5, 0, 2
    FLEXIBLE = "2+"
    REQUEST = (
        Field("controller_id", Int32),
        Field("controller_epoch", Int32),
        Field("broker_epoch", Int64, "1+", default=-1),
        Field("delete_partitions", Boolean),
        Field("ungrouped_partitions", Array(Struct(
            Field("topic_name", String),
            Field("partition_index", Int32),
        )), "0"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partition_indexes", Array(Int32)),
        )), "1+"),
    )
    RESPONSE = (
        Field("error_code", Int16),
        Field("partition_errors", Array(Struct(
            Field("topic_name", String),
            Field("partition_index", Int32),
            Field("error_code", Int16),
        ))),
    )


def _update_metadata_partition(ungrouped: bool) -> Struct:
    head = (Field("topic_name", String, "0-4"),) if ungrouped else ()
    return Struct(
        *head,
        Field("partition_index", Int32),
        Field("controller_epoch", Int32),
        Field("leader", Int32),
        Field("leader_epoch", Int32),
        Field("isr", Array(Int32)),
        Field("zk_version", Int32),
        Field("replicas", Array(Int32)),
        Field("offline_replicas", Array(Int32), "4+"),
    )


class UpdateMetadata(ApiMessage):
    """UpdateMetadata (key 6); Kafka: valid 0-7, flexible 6+. v1 lists endpoints per broker; v2
    adds the rack; v3 the listener name; v4 offline replicas; v5 the broker epoch and partitions
    grouped by topic; v6 is v5 made flexible (v7's topic ids are not kept here)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 6, 0, 6
    FLEXIBLE = "6+"
    REQUEST = (
        Field("controller_id", Int32),
        Field("controller_epoch", Int32),
        Field("broker_epoch", Int64, "5+", default=-1),
        Field("ungrouped_partition_states", Array(_update_metadata_partition(True)), "0-4"),
        Field("topic_states", Array(Struct(
            Field("topic_name", String),
            Field("partition_states", Array(_update_metadata_partition(False))),
        )), "5+"),
        Field("live_brokers", Array(Struct(
            Field("id", Int32),
            Field("v0_host", String, "0"),
            Field("v0_port", Int32, "0"),
            Field("endpoints", Array(Struct(
                Field("port", Int32),
                Field("host", String),
                Field("listener", String, "3+"),
                Field("security_protocol", Int16),
            )), "1+"),
            Field("rack", NullableString, "2+"),
        ))),
    )
    RESPONSE = (
        Field("error_code", Int16),
    )


class ControlledShutdown(ApiMessage):
    """ControlledShutdown (key 7); Kafka: valid 0-3, flexible 3+. v0 has a request header
    without client id, which our framing does not speak, so we start at v1 (= v0's body);
    v2 adds the broker epoch; v3 is v2 made flexible."""

    API_KEY, MIN_VERSION, MAX_VERSION = 7, 1, 3
    FLEXIBLE = "3+"
    REQUEST = (
        Field("broker_id", Int32),
        Field("broker_epoch", Int64, "2+", default=-1),
    )
    RESPONSE = (
        Field("error_code", Int16),
        Field("remaining_partitions", Array(Struct(
            Field("topic_name", String),
            Field("partition_index", Int32),
        ))),
    )


class OffsetsForLeaderEpoch(ApiMessage):
    """OffsetsForLeaderEpoch (key 23); Kafka: valid 0-4, flexible 4+. v1 answers with the
    leader epoch; v2 adds current_leader_epoch (fencing) and throttle time; v3 the replica id
    (-2 = a debugging consumer, -1 = a consumer, >= 0 a follower); v4 is v3 made flexible."""

    API_KEY, MIN_VERSION, MAX_VERSION = 23, 0, 4
    FLEXIBLE = "4+"
    REQUEST = (
        Field("replica_id", Int32, "3+", default=-2),
        Field("topics", Array(Struct(
            Field("topic", String),
            Field("partitions", Array(Struct(
                Field("partition", Int32),
                Field("current_leader_epoch", Int32, "2+", default=-1),
                Field("leader_epoch", Int32),
            ))),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, "2+"),
        Field("topics", Array(Struct(
            Field("topic", String),
            Field("partitions", Array(Struct(
                Field("error_code", Int16),
                Field("partition", Int32),
                Field("leader_epoch", Int32, "1+", default=-1),
                Field("end_offset", Int64, default=-1),
            ))),
        ))),
    )


INTER_BROKER_APIS: dict[int, type[ApiMessage]] = {
    cls.API_KEY: cls for cls in (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
                                 OffsetsForLeaderEpoch)
}
