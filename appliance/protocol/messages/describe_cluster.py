"""DescribeCluster (key 60, KIP-700): the cluster id, the controller and every live broker, for
admin clients (confluent-kafka's ``describe_cluster``). Kafka's DescribeClusterRequest/Response
.json: valid 0-1, flexible in every version; v1 adds the endpoint type (KIP-919: 1 = brokers,
2 = controllers; we have brokers only)."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Boolean, Int8, Int16, Int32, NullableString, String

__all__ = ["DescribeCluster", "ENDPOINT_TYPE_BROKERS"]

ENDPOINT_TYPE_BROKERS = 1


class DescribeCluster(ApiMessage):
    """DescribeCluster (key 60)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 60, 0, 1
    FLEXIBLE = "0+"
    REQUEST = (
        Field("include_cluster_authorized_operations", Boolean),
        Field("endpoint_type", Int8, versions="1+", default=ENDPOINT_TYPE_BROKERS),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
        Field("error_message", NullableString),
        Field("endpoint_type", Int8, versions="1+", default=ENDPOINT_TYPE_BROKERS),
        Field("cluster_id", String),
        Field("controller_id", Int32, default=-1),
        Field("brokers", Array(Struct(
            Field("broker_id", Int32),
            Field("host", String),
            Field("port", Int32),
            Field("rack", NullableString),
        ))),
        Field("cluster_authorized_operations", Int32, default=-2147483648),
    )
