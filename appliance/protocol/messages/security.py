"""The authentication APIs: SaslHandshake, SaslAuthenticate, DescribeUserScramCredentials and
AlterUserScramCredentials. Field lists follow Kafka's clients/src/main/resources/common/message
JSON files for the versions we advertise."""

from __future__ import annotations

from appliance.protocol.schema import ApiMessage, Field, Struct
from appliance.protocol.types import Array, Bytes, Int8, Int16, Int32, Int64, NullableString, String

__all__ = ["SaslHandshake", "SaslAuthenticate", "DescribeUserScramCredentials", "AlterUserScramCredentials",
           "DescribeAcls", "CreateAcls", "DeleteAcls"]


class SaslHandshake(ApiMessage):
    """SaslHandshake (key 17); v0: the SASL tokens that follow travel as bare size-prefixed
    frames (Kafka's pre-KIP-152 framing); v1: they travel in SaslAuthenticate requests."""

    API_KEY, MIN_VERSION, MAX_VERSION = 17, 0, 1
    REQUEST = (Field("mechanism", String),)
    RESPONSE = (
        Field("error_code", Int16),
        Field("mechanisms", Array(String)),
    )


class SaslAuthenticate(ApiMessage):
    """SaslAuthenticate (key 36); Kafka: valid 0-2, flexible 2+; v1 adds the session lifetime
    (KIP-368: the client re-authenticates before it ends)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 36, 0, 2
    FLEXIBLE = "2+"
    REQUEST = (Field("auth_bytes", Bytes),)
    RESPONSE = (
        Field("error_code", Int16),
        Field("error_message", NullableString),
        Field("auth_bytes", Bytes),
        Field("session_lifetime_ms", Int64, versions="1+"),
    )


class DescribeUserScramCredentials(ApiMessage):
    """DescribeUserScramCredentials (key 50, KIP-554); flexible from v0. ``users`` null: all."""

    API_KEY, MIN_VERSION, MAX_VERSION = 50, 0, 0
    FLEXIBLE = "0+"
    REQUEST = (
        Field("users", Array(Struct(Field("name", String))), nullable=True),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
        Field("error_message", NullableString),
        Field("results", Array(Struct(
            Field("user", String),
            Field("error_code", Int16),
            Field("error_message", NullableString),
            Field("credential_infos", Array(Struct(
                Field("mechanism", Int8),
                Field("iterations", Int32),
            ))),
        ))),
    )


class AlterUserScramCredentials(ApiMessage):
    """AlterUserScramCredentials (key 51, KIP-554); flexible from v0. The client salts and
    iterates the password itself: only the salted password crosses the wire."""

    API_KEY, MIN_VERSION, MAX_VERSION = 51, 0, 0
    FLEXIBLE = "0+"
    REQUEST = (
        Field("deletions", Array(Struct(
            Field("name", String),
            Field("mechanism", Int8),
        ))),
        Field("upsertions", Array(Struct(
            Field("name", String),
            Field("mechanism", Int8),
            Field("iterations", Int32),
            Field("salt", Bytes),
            Field("salted_password", Bytes),
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results", Array(Struct(
            Field("user", String),
            Field("error_code", Int16),
            Field("error_message", NullableString),
        ))),
    )


# the fields an ACL's principal, host, operation and permission travel in, and an ACL filter
_ACL_ENTRY = (
    Field("principal", String),
    Field("host", String),
    Field("operation", Int8),
    Field("permission_type", Int8),
)
_ACL_FILTER = (
    Field("resource_type_filter", Int8),
    Field("resource_name_filter", NullableString),
    Field("pattern_type_filter", Int8, versions="1+", default=3),
    Field("principal_filter", NullableString),
    Field("host_filter", NullableString),
    Field("operation", Int8),
    Field("permission_type", Int8),
)


class DescribeAcls(ApiMessage):
    """DescribeAcls (key 29); Kafka: valid 0-3, flexible 2+; v1 adds pattern types (KIP-290)."""

    API_KEY, MIN_VERSION, MAX_VERSION = 29, 0, 3
    FLEXIBLE = "2+"
    REQUEST = _ACL_FILTER
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("error_code", Int16),
        Field("error_message", NullableString),
        Field("resources", Array(Struct(
            Field("resource_type", Int8),
            Field("resource_name", String),
            Field("pattern_type", Int8, versions="1+", default=3),
            Field("acls", Array(Struct(*_ACL_ENTRY))),
        ))),
    )


class CreateAcls(ApiMessage):
    """CreateAcls (key 30); Kafka: valid 0-3, flexible 2+."""

    API_KEY, MIN_VERSION, MAX_VERSION = 30, 0, 3
    FLEXIBLE = "2+"
    REQUEST = (
        Field("creations", Array(Struct(
            Field("resource_type", Int8),
            Field("resource_name", String),
            Field("resource_pattern_type", Int8, versions="1+", default=3),
            *_ACL_ENTRY,
        ))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("results", Array(Struct(
            Field("error_code", Int16),
            Field("error_message", NullableString),
        ))),
    )


class DeleteAcls(ApiMessage):
    """DeleteAcls (key 31); Kafka: valid 0-3, flexible 2+."""

    API_KEY, MIN_VERSION, MAX_VERSION = 31, 0, 3
    FLEXIBLE = "2+"
    REQUEST = (
        Field("filters", Array(Struct(*_ACL_FILTER))),
    )
    RESPONSE = (
        Field("throttle_time_ms", Int32),
        Field("filter_results", Array(Struct(
            Field("error_code", Int16),
            Field("error_message", NullableString),
            Field("matching_acls", Array(Struct(
                Field("error_code", Int16),
                Field("error_message", NullableString),
                Field("resource_type", Int8),
                Field("resource_name", String),
                Field("pattern_type", Int8, versions="1+", default=3),
                *_ACL_ENTRY,
            ))),
        ))),
    )
