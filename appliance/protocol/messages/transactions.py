"""The transaction APIs (KIP-98, KIP-447): AddPartitionsToTxn (24), AddOffsetsToTxn (25),
EndTxn (26), WriteTxnMarkers (27, broker to broker) and TxnOffsetCommit (28); the admin's view
of them (KIP-664): DescribeTransactions (65) and ListTransactions (66). Field names and
versions from Kafka's message JSON. We stop before KIP-890's versions (AddPartitionsToTxn v4+
batches transactions for brokers' verification, EndTxn v4+ / v5+ add TRANSACTION_ABORTABLE and
the bumped epoch), which need the server-side verification we do not do.

None is in ``messages.__all__`` (so none is advertised) until its handler is routed."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Boolean, Int16, Int32, Int64, NullableString, String

__all__ = ["AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
           "DescribeTransactions", "ListTransactions"]


class AddPartitionsToTxn(ApiMessage):
    """AddPartitionsToTxn (key 24); Kafka: valid 0-5, flexible 3+. v1 throttles after
    answering, v2 may answer PRODUCER_FENCED."""

    API_KEY, MIN_VERSION, MAX_VERSION = 24, 0, 3
    FLEXIBLE = "3+"
    REQUEST = (
        Field("transactional_id", String),
        Field("producer_id", Int64),
        Field("producer_epoch", Int16),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Int32)),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results_by_topic_v3_and_below", Array(Struct(
            Field("name", String),
            Field("results_by_partition", Array(Struct(
                Field("partition_index", Int32),
                Field("partition_error_code", Int16),
            ))),
        ))),
    )


class AddOffsetsToTxn(ApiMessage):
    """AddOffsetsToTxn (key 25); Kafka: valid 0-4, flexible 3+ (v4: TRANSACTION_ABORTABLE)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 25, 0, 3
    FLEXIBLE = "3+"
    REQUEST = (
        Field("transactional_id", String),
        Field("producer_id", Int64),
        Field("producer_epoch", Int16),
        Field("group_id", String),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
    )


class EndTxn(ApiMessage):
    """EndTxn (key 26); Kafka: valid 0-5, flexible 3+. ``committed``: true commits, false
    aborts."""

    API_KEY, MIN_VERSION, MAX_VERSION = 26, 0, 3
    FLEXIBLE = "3+"
    REQUEST = (
        Field("transactional_id", String),
        Field("producer_id", Int64),
        Field("producer_epoch", Int16),
        Field("committed", Boolean),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
    )


class WriteTxnMarkers(ApiMessage):
    """WriteTxnMarkers (key 27), from a transaction coordinator to each partition's leader;
    Kafka: valid 0-1, flexible 1+. ``transaction_result``: true COMMIT, false ABORT."""

    API_KEY, MIN_VERSION, MAX_VERSION = 27, 0, 1
    FLEXIBLE = "1+"
    REQUEST = (
        Field("markers", Array(Struct(
            Field("producer_id", Int64),
            Field("producer_epoch", Int16),
            Field("transaction_result", Boolean),
            Field("topics", Array(Struct(
                Field("name", String),
                Field("partition_indexes", Array(Int32)),
            ))),
            Field("coordinator_epoch", Int32),
        ))),
    )
    RESPONSE = (
        Field("markers", Array(Struct(
            Field("producer_id", Int64),
            Field("topics", Array(Struct(
                Field("name", String),
                Field("partitions", Array(Struct(
                    Field("partition_index", Int32),
                    Field("error_code", Int16),
                ))),
            ))),
        ))),
    )


class TxnOffsetCommit(ApiMessage):
    """TxnOffsetCommit (key 28), to the group coordinator; Kafka: valid 0-3, flexible 3+. v2
    adds the committed leader epoch, v3 the member id, instance id and generation (KIP-447:
    the coordinator fences a zombie whose group generation is stale)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 28, 0, 3
    FLEXIBLE = "3+"
    REQUEST = (
        Field("transactional_id", String),
        Field("group_id", String),
        Field("producer_id", Int64),
        Field("producer_epoch", Int16),
        Field("generation_id", Int32, versions="3+", default=-1),
        Field("member_id", String, versions="3+"),
        Field("group_instance_id", NullableString, versions="3+"),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("committed_offset", Int64),
                Field("committed_leader_epoch", Int32, versions="2+", default=-1),
                Field("committed_metadata", NullableString),
            ))),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
            ))),
        ))),
    )


class DescribeTransactions(ApiMessage):
    """DescribeTransactions (key 65, KIP-664), to each id's coordinator; Kafka: valid 0,
    flexible 0+. ``transaction_start_time_ms`` -1 when no transaction is open."""

    API_KEY, MIN_VERSION, MAX_VERSION = 65, 0, 0
    FLEXIBLE = "0+"
    REQUEST = (
        Field("transactional_ids", Array(String)),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("transaction_states", Array(Struct(
            Field("error_code", Int16),
            Field("transactional_id", String),
            Field("transaction_state", String),
            Field("transaction_timeout_ms", Int32),
            Field("transaction_start_time_ms", Int64),
            Field("producer_id", Int64),
            Field("producer_epoch", Int16),
            Field("topics", Array(Struct(
                Field("topic", String),
                Field("partitions", Array(Int32)),
            ))),
        ))),
    )


class ListTransactions(ApiMessage):
    """ListTransactions (key 66, KIP-664), to every broker: each lists the ids it coordinates;
    Kafka: valid 0-1, flexible 0+. v1 adds the duration filter (KIP-994: only transactions
    open longer than it; -1 none); empty state / producer id filters match all."""

    API_KEY, MIN_VERSION, MAX_VERSION = 66, 0, 1
    FLEXIBLE = "0+"
    REQUEST = (
        Field("state_filters", Array(String)),
        Field("producer_id_filters", Array(Int64)),
        Field("duration_filter", Int64, versions="1+", default=-1),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
        Field("unknown_state_filters", Array(String)),
        Field("transaction_states", Array(Struct(
            Field("transactional_id", String),
            Field("producer_id", Int64),
            Field("transaction_state", String),
        ))),
    )
