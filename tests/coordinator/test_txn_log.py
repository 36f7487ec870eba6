"""The ``__transaction_state`` record formats (golden bytes written from Kafka's
TransactionLogKey/TransactionLogValue JSON), the transaction state table, and the routing of a
transactional id (Kafka's Utils.abs)."""

from __future__ import annotations

import pytest

from appliance.coordinator import txn_log_schema as schema
from appliance.coordinator.routing import java_string_hash, txn_partition_for
from appliance.coordinator.txn_state import (
    STATE_OF_BYTE,
    STATUS_BYTE,
    TRANSITIONS,
    IllegalTransition,
    TxnState,
    check_transition,
)

S = TxnState

# key v0: int16 version 0, then TransactionalId as a (non-compact) string
KEY_GOLDEN = bytes.fromhex("0000" "0002" "7478")
# value v0: version, ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
# TransactionStatus int8, TransactionPartitions [Topic string, PartitionIds [int32]] (int32
# counts), TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64
VALUE_GOLDEN = bytes.fromhex(
    "0000" "0000000000000007" "0002" "0000ea60" "01"
    "00000001" "000174" "00000002" "00000000" "00000003"
    "00000000000003e8" "00000000000001f4")
VALUE = schema.TxnValue(7, 2, 60000, 1, (("t", (0, 3)),), 1000, 500)


def test_key_golden_bytes():
    assert schema.encode_txn_key(schema.TxnKey("tx")) == KEY_GOLDEN
    assert schema.decode_txn_key(KEY_GOLDEN) == schema.TxnKey("tx")


def test_value_golden_bytes():
    assert schema.encode_txn_value(VALUE) == VALUE_GOLDEN
    assert schema.decode_txn_value(VALUE_GOLDEN) == VALUE


def test_value_with_null_partitions():
    v = schema.TxnValue(1, 0, 1000, 0, None, 5, -1)
    data = schema.encode_txn_value(v)
    assert data[2 + 8 + 2 + 4 + 1:][:4] == b"\xff\xff\xff\xff"  # a null array: count -1
    assert schema.decode_txn_value(data) == v


def test_flexible_v1_value_is_read():
    """Kafka 3.x+ writes v1 (flexible: compact arrays and strings, tagged fields)."""
    data = bytes.fromhex(
        "0001" "0000000000000007" "0002" "0000ea60" "01"
        "02" "0274" "03" "00000000" "00000003" "00"   # 1 topic "t", 2 partitions, no tags
        "00000000000003e8" "00000000000001f4"
        "01" "00" "08" "0000000000000005")             # tag 0 (PreviousProducerId) = 5
    assert schema.decode_txn_value(data) == VALUE


@pytest.mark.parametrize("cut", [1, 3, 10, 17, 20, len(VALUE_GOLDEN) - 1])
def test_truncated_value_is_a_schema_error(cut):
    with pytest.raises(schema.SchemaError):
        schema.decode_txn_value(VALUE_GOLDEN[:cut])


def test_unknown_versions_are_schema_errors():
    with pytest.raises(schema.SchemaError):
        schema.decode_txn_key(b"\x00\x01" + KEY_GOLDEN[2:])
    with pytest.raises(schema.SchemaError):
        schema.decode_txn_value(b"\x00\x02" + VALUE_GOLDEN[2:])


# -- the state table ----------------------------------------------------------------------

def test_status_bytes_are_kafkas():
    assert STATUS_BYTE == {S.EMPTY: 0, S.ONGOING: 1, S.PREPARE_COMMIT: 2, S.PREPARE_ABORT: 3,
                           S.COMPLETE_COMMIT: 4, S.COMPLETE_ABORT: 5, S.DEAD: 6, S.PREPARE_EPOCH_FENCE: 7}
    assert {STATE_OF_BYTE[b] for b in STATUS_BYTE.values()} == set(STATUS_BYTE)


# Kafka's TransactionState.validPreviousStates, written out as (to, {from})
KAFKA_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


@pytest.mark.parametrize("old", list(STATUS_BYTE))
@pytest.mark.parametrize("new", list(STATUS_BYTE))
def test_transition_table_is_kafkas(old, new):
    legal = old in KAFKA_PREVIOUS[new]
    assert (new in TRANSITIONS[old]) == legal
    if legal:
        check_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)


# -- routing ------------------------------------------------------------------------------

def test_routing_uses_utils_abs():
    # negative hash: Utils.abs gives 862545276 (-> 26 of 50), where & 0x7fffffff would give
    # 1284938372 (-> 22): a Kafka cluster puts "Hello World" on partition 26
    assert java_string_hash("Hello World") == -862545276
    assert txn_partition_for("Hello World", 50) == 26
    # Integer.MIN_VALUE: Utils.abs maps it to 0
    assert java_string_hash("polygenelubricants") == -2**31
    assert txn_partition_for("polygenelubricants", 50) == 0
    assert txn_partition_for("hello", 50) == 99162322 % 50


def test_topic_config_caps_the_min_isr_at_the_replication_factor():
    from appliance.config import BrokerConfig
    from appliance.coordinator.routing import txn_topic_config

    cfg = BrokerConfig.load(None, {"transaction.state.log.min.isr": "2",
                                   "transaction.state.log.segment.bytes": "1048576"}, warn=False)
    assert txn_topic_config(cfg, 3) == {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert txn_topic_config(cfg, 1)["min.insync.replicas"] == "1"  # one broker: writes stay possible
