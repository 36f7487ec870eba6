"""The data-path and bootstrap APIs: ApiVersions, Metadata, Produce, Fetch, ListOffsets,
InitProducerId. Field lists follow Kafka's clients/src/main/resources/common/message/*.json,
restricted to the versions we advertise; flexible versions (KIP-482) are derived from FLEXIBLE."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import (
    Array,
    Boolean,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableString,
    Records,
    String,
    Uuid,
)

__all__ = ["ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "InitProducerId"]


class ApiVersions(ApiMessage):
    """ApiVersions (key 18); Kafka: valid 0-4, flexible 3+. The response header stays v0 in every
    version (KIP-511). v3 adds the client's software name and version; the response's tagged
    feature fields (KIP-584) are not sent (no features are finalized here)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 3
    FLEXIBLE = "3+"
    FLEXIBLE_RESPONSE_HEADER = False
    REQUEST = (
        Field("client_software_name", String, versions="3+"),
        Field("client_software_version", String, versions="3+"),
    )
    RESPONSE = (
        Field("error_code", Int16),
        Field("api_keys", Array(Struct(
            Field("api_key", Int16),
            Field("min_version", Int16),
            Field("max_version", Int16),
        ))),
        Field("throttle_time_ms", Int32, versions="1+"),
    )


class Metadata(ApiMessage):
    """Metadata (key 3); Kafka: valid 0-13, flexible 9+. v7 adds leader epochs, v8 authorized
    operations, v10 topic ids (KIP-516), v11 drops the cluster's authorized
    operations, v12 lets a topic be asked by id alone (name null)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 3, 0, 12
    FLEXIBLE = "9+"
    REQUEST = (
        Field("topics", Array(Struct(  # v0: not nullable, an empty array asks for every topic
            Field("topic_id", Uuid, versions="10+"),
            Field("name", String, nullable="10+"),
        )), nullable="1+"),
        Field("allow_auto_topic_creation", Boolean, versions="4+", default=True),
        Field("include_cluster_authorized_operations", Boolean, versions="8-10"),
        Field("include_topic_authorized_operations", Boolean, versions="8+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="3+"),
        Field("brokers", Array(Struct(
            Field("node_id", Int32),
            Field("host", String),
            Field("port", Int32),
            Field("rack", NullableString, versions="1+"),
        ))),
        Field("cluster_id", NullableString, versions="2+"),
        Field("controller_id", Int32, versions="1+", default=-1),
        Field("topics", Array(Struct(
            Field("error_code", Int16),
            Field("name", String, nullable="12+"),
            Field("topic_id", Uuid, versions="10+"),
            Field("is_internal", Boolean, versions="1+"),
            Field("partitions", Array(Struct(
                Field("error_code", Int16),
                Field("partition_index", Int32),
                Field("leader_id", Int32),
                Field("leader_epoch", Int32, versions="7+", default=-1),
                Field("replica_nodes", Array(Int32)),
                Field("isr_nodes", Array(Int32)),
                Field("offline_replicas", Array(Int32), versions="5+"),
            ))),
            Field("topic_authorized_operations", Int32, versions="8+", default=-2147483648),
        ))),
        Field("cluster_authorized_operations", Int32, versions="8-10", default=-2147483648),
    )


class Produce(ApiMessage):
    """Produce (key 0); Kafka: valid 3-13, flexible 9+. v8 adds per-record errors and an error
    message (KIP-467); v10's tagged leader hints (KIP-951) are not served."""

    API_KEY, MIN_VERSION, MAX_VERSION = 0, 0, 9
    FLEXIBLE = "9+"
    REQUEST = (
        Field("transactional_id", NullableString, versions="3+"),
        Field("acks", Int16),
        Field("timeout_ms", Int32),
        Field("topic_data", Array(Struct(
            Field("name", String),
            Field("partition_data", Array(Struct(
                Field("index", Int32),
                Field("records", Records),
            ))),
        ))),
    )
    RESPONSE = (
        Field("responses", Array(Struct(
            Field("name", String),
            Field("partition_responses", Array(Struct(
                Field("index", Int32),
                Field("error_code", Int16),
                Field("base_offset", Int64),
                Field("log_append_time_ms", Int64, versions="2+", default=-1),
                Field("log_start_offset", Int64, versions="5+", default=-1),
                Field("record_errors", Array(Struct(
                    Field("batch_index", Int32),
                    Field("batch_index_error_message", NullableString),
                )), versions="8+"),
                Field("error_message", NullableString, versions="8+"),
            ))),
        ))),
        Field("throttle_time_ms", Int32, versions="1+"),
    )


class Fetch(ApiMessage):
    """Fetch (key 1); Kafka: valid 4-17, flexible 12+; 0-3 kept for old clients (the broker
    down-converts to magic 0 for v0-1 and magic 1 for v2-3). v12 (flexible) adds the last
    fetched epoch and the tagged diverging epoch / current leader / snapshot id; v13 names
    topics by id (KIP-516); v14 only adds an error we never send (tiered storage); v15 moves
    the replica id into the tagged ReplicaState (KIP-903). v16's NodeEndpoints (KIP-951) and
    v17's directory ids (KIP-853) are not served, so we stop at 15."""

    API_KEY, MIN_VERSION, MAX_VERSION = 1, 0, 15
    FLEXIBLE = "12+"
    REQUEST = (
        Field("cluster_id", NullableString, versions="12+", tag=0),  # KIP-595 (KRaft fetchers)
        Field("replica_id", Int32, versions="0-14", default=-1),
        Field("replica_state", Struct(  # KIP-903: v15+ carries the replica id here
            Field("replica_id", Int32, default=-1),
            Field("replica_epoch", Int64, default=-1),
        ), versions="15+", tag=1),
        Field("max_wait_ms", Int32),
        Field("min_bytes", Int32),
        Field("max_bytes", Int32, versions="3+", default=2147483647),
        Field("isolation_level", Int8, versions="4+"),
        Field("session_id", Int32, versions="7+"),
        Field("session_epoch", Int32, versions="7+", default=-1),
        Field("topics", Array(Struct(
            Field("topic", String, versions="0-12"),
            Field("topic_id", Uuid, versions="13+"),
            Field("partitions", Array(Struct(
                Field("partition", Int32),
                Field("current_leader_epoch", Int32, versions="9+", default=-1),
                Field("fetch_offset", Int64),
                Field("last_fetched_epoch", Int32, versions="12+", default=-1),
                Field("log_start_offset", Int64, versions="5+", default=-1),
                Field("partition_max_bytes", Int32),
            ))),
        ))),
        Field("forgotten_topics_data", Array(Struct(
            Field("topic", String, versions="7-12"),
            Field("topic_id", Uuid, versions="13+"),
            Field("partitions", Array(Int32)),
        )), versions="7+"),
        Field("rack_id", String, versions="11+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("error_code", Int16, versions="7+"),
        Field("session_id", Int32, versions="7+"),
        Field("responses", Array(Struct(
            Field("topic", String, versions="0-12"),
            Field("topic_id", Uuid, versions="13+"),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
                Field("high_watermark", Int64),
                Field("last_stable_offset", Int64, versions="4+", default=-1),
                Field("log_start_offset", Int64, versions="5+", default=-1),
                Field("diverging_epoch", Struct(  # KIP-320: set when the fetcher's log diverges
                    Field("epoch", Int32, default=-1),
                    Field("end_offset", Int64, default=-1),
                ), versions="12+", tag=0),
                Field("current_leader", Struct(
                    Field("leader_id", Int32, default=-1),
                    Field("leader_epoch", Int32, default=-1),
                ), versions="12+", tag=1),
                Field("snapshot_id", Struct(
                    Field("end_offset", Int64, default=-1),
                    Field("epoch", Int32, default=-1),
                ), versions="12+", tag=2),
                Field("aborted_transactions", Array(Struct(
                    Field("producer_id", Int64),
                    Field("first_offset", Int64),
                )), versions="4+", nullable=True),
                Field("preferred_read_replica", Int32, versions="11+", default=-1),
                Field("records", Records),
            ))),
        ))),
    )


class ListOffsets(ApiMessage):
    """ListOffsets (key 2); Kafka: valid 1-10, flexible 6+. v4 adds leader epochs; v7 the
    max-timestamp query (-3, KIP-734); v8 the local log start (-4, KIP-405: with no tiered
    storage, the log start). v9's last tiered offset (-5) is not served: we stop at 8."""

    API_KEY, MIN_VERSION, MAX_VERSION = 2, 0, 8
    FLEXIBLE = "6+"
    REQUEST = (
        Field("replica_id", Int32, default=-1),  # -1: an ordinary consumer, not a follower
        Field("isolation_level", Int8, versions="2+"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("current_leader_epoch", Int32, versions="4+", default=-1),
                Field("timestamp", Int64),
                Field("max_num_offsets", Int32, versions="0", default=1),
            ))),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="2+"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
                Field("old_style_offsets", Array(Int64), versions="0"),  # v0: a list, newest first
                Field("timestamp", Int64, versions="1+", default=-1),
                Field("offset", Int64, versions="1+", default=-1),
                Field("leader_epoch", Int32, versions="4+", default=-1),
            ))),
        ))),
    )


class InitProducerId(ApiMessage):
    """InitProducerId (key 22); Kafka: valid 0-6, flexible 2+. v3 (KIP-360) passes the
    producer's current id and epoch so an idempotent producer can bump its epoch; we answer
    with a fresh producer id (epoch 0), which the producer adopts the same way."""

    API_KEY, MIN_VERSION, MAX_VERSION = 22, 0, 4
    FLEXIBLE = "2+"
    REQUEST = (
        Field("transactional_id", NullableString),
        Field("transaction_timeout_ms", Int32),
        Field("producer_id", Int64, versions="3+", default=-1),
        Field("producer_epoch", Int16, versions="3+", default=-1),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
        Field("producer_id", Int64, default=-1),
        Field("producer_epoch", Int16),
    )
