"""The admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs.
Field lists follow Kafka's clients/src/main/resources/common/message/*.json, restricted to the
versions we advertise; flexible versions (KIP-482) are derived from FLEXIBLE."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import (
    Array,
    Boolean,
    Int8,
    Int16,
    Int32,
    NullableString,
    String,
    Uuid,
)

__all__ = ["CreateTopics", "DeleteTopics", "CreatePartitions", "DescribeConfigs", "AlterConfigs", "IncrementalAlterConfigs"]


class CreateTopics(ApiMessage):
    """CreateTopics (key 19); Kafka: valid 2-7, flexible 5+; v4 (KIP-464): -1 partitions or
    replication factor = the broker defaults (same fields as v3). v5 (flexible) answers each
    topic's partition count, replication factor and configs (KIP-525), v7 its topic id (we
    keep none: the zero UUID)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 19, 0, 7
    FLEXIBLE = "5+"
    REQUEST = (
        Field("topics", Array(Struct(
            Field("name", String),
            Field("num_partitions", Int32),
            Field("replication_factor", Int16),
            Field("assignments", Array(Struct(
                Field("partition_index", Int32),
                Field("broker_ids", Array(Int32)),
            ))),
            Field("configs", Array(Struct(
                Field("name", String),
                Field("value", NullableString),
            ))),
        ))),
        Field("timeout_ms", Int32, default=60000),
        Field("validate_only", Boolean, versions="1+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="2+"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("topic_id", Uuid, versions="7+"),
            Field("error_code", Int16),
            Field("error_message", NullableString, versions="1+"),
            Field("topic_config_error_code", Int16, versions="5+", tag=0),
            Field("num_partitions", Int32, versions="5+", default=-1),
            Field("replication_factor", Int16, versions="5+", default=-1),
            Field("configs", Array(Struct(
                Field("name", String),
                Field("value", NullableString),
                Field("read_only", Boolean),
                Field("config_source", Int8, default=-1),
                Field("is_sensitive", Boolean),
            )), versions="5+", nullable=True),
        ))),
    )


class DeleteTopics(ApiMessage):
    """DeleteTopics (key 20); Kafka: valid 1-6, flexible 4+. v5 answers an error message; v6
    names each topic by name or by id (KIP-516)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 20, 0, 6
    FLEXIBLE = "4+"
    REQUEST = (
        Field("topics", Array(Struct(
            Field("name", NullableString),
            Field("topic_id", Uuid),
        )), versions="6+"),
        Field("topic_names", Array(String), versions="0-5"),
        Field("timeout_ms", Int32),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32, versions="1+"),
        Field("responses", Array(Struct(
            Field("name", String, nullable="6+"),
            Field("topic_id", Uuid, versions="6+"),
            Field("error_code", Int16),
            Field("error_message", NullableString, versions="5+"),
        ))),
    )


class CreatePartitions(ApiMessage):
    """CreatePartitions (key 37); Kafka: valid 0-3, flexible 2+ (v1-3 as v0, KIP-219)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 37, 0, 3
    FLEXIBLE = "2+"
    REQUEST = (
        Field("topics", Array(Struct(
            Field("name", String),
            Field("count", Int32),
            Field("assignments", Array(Struct(
                Field("broker_ids", Array(Int32)),
            )), nullable=True),
        ))),
        Field("timeout_ms", Int32),
        Field("validate_only", Boolean),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results", Array(Struct(
            Field("name", String),
            Field("error_code", Int16),
            Field("error_message", NullableString),
        ))),
    )


class DescribeConfigs(ApiMessage):
    """DescribeConfigs (key 32); Kafka: valid 1-4, flexible 4+. v3 adds each key's type and
    documentation (KIP-569)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 32, 0, 4
    FLEXIBLE = "4+"
    REQUEST = (
        Field("resources", Array(Struct(
            Field("resource_type", Int8),
            Field("resource_name", String),
            Field("configuration_keys", Array(String), nullable=True),
        ))),
        Field("include_synonyms", Boolean, versions="1+"),
        Field("include_documentation", Boolean, versions="3+"),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results", Array(Struct(
            Field("error_code", Int16),
            Field("error_message", NullableString),
            Field("resource_type", Int8),
            Field("resource_name", String),
            Field("configs", Array(Struct(
                Field("name", String),
                Field("value", NullableString),
                Field("read_only", Boolean),
                Field("config_source", Int8, versions="1+", default=-1),
                Field("is_default", Boolean, versions="0"),
                Field("is_sensitive", Boolean),
                Field("synonyms", Array(Struct(
                    Field("name", String),
                    Field("value", NullableString),
                    Field("source", Int8),
                )), versions="1+"),
                Field("config_type", Int8, versions="3+"),
                Field("documentation", NullableString, versions="3+"),
            ))),
        ))),
    )


class AlterConfigs(ApiMessage):
    """AlterConfigs (key 33); Kafka: valid 0-2, flexible 2+."""

    API_KEY, MIN_VERSION, MAX_VERSION = 33, 0, 2
    FLEXIBLE = "2+"
    REQUEST = (
        Field("resources", Array(Struct(
            Field("resource_type", Int8),
            Field("resource_name", String),
            Field("configs", Array(Struct(
                Field("name", String),
                Field("value", NullableString),
            ))),
        ))),
        Field("validate_only", Boolean),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("responses", Array(Struct(
            Field("error_code", Int16),
            Field("error_message", NullableString),
            Field("resource_type", Int8),
            Field("resource_name", String),
        ))),
    )


class IncrementalAlterConfigs(ApiMessage):
    """IncrementalAlterConfigs (key 44, KIP-339); Kafka: valid 0-1, flexible 1+. Each config
    names an operation: 0 SET, 1 DELETE (back to the default), 2 APPEND, 3 SUBTRACT (list keys)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 44, 0, 1
    FLEXIBLE = "1+"
    REQUEST = (
        Field("resources", Array(Struct(
            Field("resource_type", Int8),
            Field("resource_name", String),
            Field("configs", Array(Struct(
                Field("name", String),
                Field("config_operation", Int8),
                Field("value", NullableString),
            ))),
        ))),
        Field("validate_only", Boolean),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("responses", Array(Struct(
            Field("error_code", Int16),
            Field("error_message", NullableString),
            Field("resource_type", Int8),
            Field("resource_name", String),
        ))),
    )
