"""DescribeProducers (key 61, KIP-664): the active producers' state of each partition, as its
leader keeps it for idempotence and transactions. Kafka's DescribeProducersRequest/Response
.json: version 0 only, flexible."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Int16, Int32, Int64, NullableString, String

__all__ = ["DescribeProducers"]


class DescribeProducers(ApiMessage):
    """DescribeProducers (key 61)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 61, 0, 0
    FLEXIBLE = "0+"
    REQUEST = (
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partition_indexes", Array(Int32)),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("topics", Array(Struct(
            Field("name", String),
            Field("partitions", Array(Struct(
                Field("partition_index", Int32),
                Field("error_code", Int16),
                Field("error_message", NullableString),
                Field("active_producers", Array(Struct(
                    Field("producer_id", Int64),
                    Field("producer_epoch", Int32),
                    Field("last_sequence", Int32, default=-1),
                    Field("last_timestamp", Int64, default=-1),
                    Field("coordinator_epoch", Int32),
                    Field("current_txn_start_offset", Int64, default=-1),
                ))),
            ))),
        ))),
    )
