"""Kafka's error codes, declared once, and the exceptions that carry them.

Every layer (records, storage, protocol, broker) raises a subclass of :class:`KafkaError`;
whoever answers a client turns it into the wire code with ``exc.code``.
"""

from __future__ import annotations

__all__ = ["ErrorCode", "KafkaError", "error_for_code"] + [
    "CorruptRecordError", "InvalidRecordError", "UnsupportedForMessageFormatError", "MessageTooLargeError", "OffsetOutOfRangeError",
    "UnknownTopicOrPartitionError", "InvalidRequestError", "UnsupportedVersionError",
    "InvalidTopicError", "TopicAlreadyExistsError", "InvalidPartitionsError",
    "InvalidReplicationFactorError", "InvalidConfigError", "InvalidRequiredAcksError",
    "NotLeaderOrFollowerError", "RequestTimedOutError", "OutOfOrderSequenceError",
    "DuplicateSequenceError", "InvalidProducerEpochError", "UnsupportedCompressionTypeError",
    "KafkaStorageError", "InvalidTimestampError", "PolicyViolationError",
    "TopicAuthorizationFailedError", "GroupAuthorizationFailedError", "ClusterAuthorizationFailedError",
]

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka's wire error codes (org.apache.kafka.common.protocol.Errors)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90  # KIP-588: a newer instance of the transactional id took over
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100  # KIP-516: a request names a topic id no topic has
    INCONSISTENT_TOPIC_ID = 103
    TRANSACTIONAL_ID_NOT_FOUND = 105  # KIP-664: DescribeTransactions of an id its coordinator lacks
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    UNSUPPORTED_ENDPOINT_TYPE = 115  # DescribeCluster asked for KRaft controllers (KIP-919)


class KafkaError(Exception):
    """Base of every error that maps to a Kafka wire error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code.name)


_BY_CODE: dict[int, type[KafkaError]] = {}


def _error(name: str, code: ErrorCode) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {"code": code, "__doc__": f"Kafka error {code.name} ({int(code)})."})
    _BY_CODE[int(code)] = cls
    return cls


CorruptRecordError = _error("CorruptRecordError", ErrorCode.CORRUPT_MESSAGE)
InvalidRecordError = _error("InvalidRecordError", ErrorCode.INVALID_RECORD)
MessageTooLargeError = _error("MessageTooLargeError", ErrorCode.MESSAGE_TOO_LARGE)
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
InvalidRequestError = _error("InvalidRequestError", ErrorCode.INVALID_REQUEST)
UnsupportedVersionError = _error("UnsupportedVersionError", ErrorCode.UNSUPPORTED_VERSION)
InvalidTopicError = _error("InvalidTopicError", ErrorCode.INVALID_TOPIC_EXCEPTION)
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", ErrorCode.TOPIC_ALREADY_EXISTS)
InvalidPartitionsError = _error("InvalidPartitionsError", ErrorCode.INVALID_PARTITIONS)
InvalidReplicationFactorError = _error("InvalidReplicationFactorError", ErrorCode.INVALID_REPLICATION_FACTOR)
InvalidConfigError = _error("InvalidConfigError", ErrorCode.INVALID_CONFIG)
InvalidRequiredAcksError = _error("InvalidRequiredAcksError", ErrorCode.INVALID_REQUIRED_ACKS)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", ErrorCode.NOT_LEADER_OR_FOLLOWER)
RequestTimedOutError = _error("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT)
OutOfOrderSequenceError = _error("OutOfOrderSequenceError", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
DuplicateSequenceError = _error("DuplicateSequenceError", ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
InvalidProducerEpochError = _error("InvalidProducerEpochError", ErrorCode.INVALID_PRODUCER_EPOCH)
UnsupportedCompressionTypeError = _error("UnsupportedCompressionTypeError", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
KafkaStorageError = _error("KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR)
InvalidTimestampError = _error("InvalidTimestampError", ErrorCode.INVALID_TIMESTAMP)
PolicyViolationError = _error("PolicyViolationError", ErrorCode.POLICY_VIOLATION)
TopicAuthorizationFailedError = _error("TopicAuthorizationFailedError", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GroupAuthorizationFailedError = _error("GroupAuthorizationFailedError", ErrorCode.GROUP_AUTHORIZATION_FAILED)
ClusterAuthorizationFailedError = _error("ClusterAuthorizationFailedError", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
UnsupportedForMessageFormatError = _error("UnsupportedForMessageFormatError",
                                          ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a wire code (a generic KafkaError subclass if we declare none)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _error(f"KafkaError_{ErrorCode(code).name}", ErrorCode(code))
    return cls
