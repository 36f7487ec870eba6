"""The exactly-once streaming sink (``exactlyOnce=true``): one Kafka transaction per task,
committed by the driver only once the whole micro-batch succeeded.

Task side (:meth:`ExactlyOnceStreamWriter.write`): transactional id
``<prefix>-<partition id>-<task attempt number>`` (prefix: ``transactionalIdPrefix``,
else ``appliance-spark-<query id>``, the id Spark keeps in the checkpoint). InitProducerId
aborts whatever an earlier holder of that id left open (the same task of a killed run), the
records are produced inside the transaction, and the transaction is left open; the task
returns (transactional id, producer id, epoch, partitions). A task that fails aborts its own
transaction. Attempts have ids of their own, so a retried or speculative attempt never fences
the attempt whose result the driver will commit.

Driver side (:meth:`commit`): checks that every transaction is still open (AddPartitionsToTxn
of partitions already in it), writes the decision (:mod:`spark.eos_log`) — the batch's commit
point — then sends EndTxn(commit) for each and marks the decision done. Every start of the
writer on the driver (Spark builds one for planning and one per commit) first completes a
decision that is not done; tasks of a replayed micro-batch whose decision exists write nothing.
So each batch is committed whole or not at all, whatever the tasks of a replay are given.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from appliance.errors import (
    ErrorCode,
    InvalidConfigError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from spark.eos_log import Decision, DecisionLog
from spark.options import WriteOptions
from spark.producer import Producer
from spark.txn_client import TxnClient
from spark.writer import check_write_schema, send_batches

__all__ = ["ExactlyOnceStreamWriter", "TxnTaskResult", "InjectedTaskFailure"]

log = logging.getLogger(__name__)
# EndTxn answers meaning the transaction is no longer the one decided (the coordinator aborted
# it at its timeout, bumping the epoch, or someone took its id over)
_GONE = (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
         ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.INVALID_TXN_STATE)


class InjectedTaskFailure(RuntimeError):
    """Raised by the test-only option test.failTaskOnce."""


@dataclass
class TxnTaskResult(WriterCommitMessage):
    records: int
    transactional_id: str | None  # None: the task wrote nothing (or skipped a decided batch)
    producer_id: int = -1
    epoch: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


def _local_checkpoint(opts: WriteOptions) -> str:
    raw = opts.checkpoint
    if raw is None:
        raise InvalidConfigError("exactlyOnce=true needs the checkpointLocation option on the "
                                 "writeStream (the sink keeps its commit decisions there)")
    path = raw
    if path.startswith("file:"):
        path = "/" + path[len("file:"):].lstrip("/")
    if "://" in path:
        raise InvalidConfigError(f"option checkpointLocation={raw!r}: exactlyOnce=true needs a "
                                 "checkpoint on a local or mounted file system")
    return path


def _query_id(checkpoint: str) -> str:
    """The streaming query's id, from the metadata file Spark writes when the query starts."""
    try:
        with open(os.path.join(checkpoint, "metadata")) as f:
            return json.loads(f.readline())["id"]
    except (OSError, ValueError, KeyError) as e:
        raise InvalidConfigError(f"option checkpointLocation={checkpoint!r}: no streaming query "
                                 f"metadata there ({e}); set transactionalIdPrefix") from None


def _check_broker(client: TxnClient, opts: WriteOptions, prefix: str) -> None:
    """Bad options fail the query at its start: a topic that does not exist, a transaction
    timeout the broker refuses."""
    if opts.topic is not None:
        md = client.bootstrap().request(3, {"topics": [{"name": opts.topic}],
                                            "allow_auto_topic_creation": False})
        if md.topics[0].error_code:
            raise UnknownTopicOrPartitionError(
                f"option topic={opts.topic!r}: the topic does not exist on "
                f"{opts.bootstrap_servers} ({ErrorCode(md.topics[0].error_code).name}); "
                "create it first (the exactly-once sink does not auto-create topics)")
    try:
        client.init_producer(f"{prefix}-check", opts.txn_timeout_ms)
    except KafkaError as e:
        if e.code != ErrorCode.INVALID_TRANSACTION_TIMEOUT:
            raise
        raise InvalidConfigError(
            f"option kafka.transaction.timeout.ms={opts.txn_timeout_ms}: above the broker's "
            f"transaction.max.timeout.ms at {opts.bootstrap_servers}") from None


def _commit_all(client: TxnClient, batch_id: int, txns: Sequence[tuple[str, int, int]],
                pause_ms: int = 0) -> None:
    for i, (tid, pid, epoch) in enumerate(txns):
        if i == 1 and pause_ms:  # tests: a window where the batch is committed in part
            time.sleep(pause_ms / 1000)
        try:
            client.end_txn(tid, pid, epoch, commit=True)
        except KafkaError as e:
            if e.code in _GONE:
                raise KafkaError(
                    f"micro-batch {batch_id} was decided but transaction {tid!r} was aborted "
                    f"before its commit ({e}): its records are lost. Was the driver down for "
                    "longer than kafka.transaction.timeout.ms? To go on without them, create "
                    f"{batch_id:020d}.json.done beside the decision in the checkpoint's "
                    "appliance-eos directory") from e
            raise KafkaError(f"micro-batch {batch_id} was decided but transaction {tid!r} is not "
                             f"committed yet ({e}); restarting the query completes it") from e


class ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """See the module docstring. Built on the driver; pickled to each task."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema, opts)
        self.opts = opts
        self.checkpoint = _local_checkpoint(opts)
        self.prefix = opts.txn_id_prefix or f"appliance-spark-{_query_id(self.checkpoint)}"
        client = TxnClient(opts.bootstrap_servers, opts.timeout_ms)
        try:
            _check_broker(client, opts, self.prefix)
            self.decided = self._recover(client)
        finally:
            client.close()

    def _recover(self, client: TxnClient) -> int:
        """Complete the last decision if a driver died before it was done; the id of the last
        decided micro-batch (-1: none yet)."""
        last = DecisionLog(self.checkpoint).latest()
        if last is None:
            return -1
        if not last.done:
            log.warning("micro-batch %d was decided but not completed by the previous driver: "
                        "committing its %d transaction(s)", last.batch_id, len(last.txns))
            _commit_all(client, last.batch_id, last.txns)
            DecisionLog(self.checkpoint).mark_done(last.batch_id)
        return last.batch_id

    # -- tasks ----------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TxnTaskResult:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        if batch_id <= self.decided:
            return TxnTaskResult(0, None)  # a replay of a committed micro-batch
        part = ctx.partitionId()
        tid = f"{self.prefix}-{part}-{ctx.attemptNumber()}"
        opts = self.opts
        client = TxnClient(opts.bootstrap_servers, opts.timeout_ms)
        producer = Producer(opts.bootstrap_servers, acks=-1, compression=opts.compression,
                            batch_records=opts.batch_records, timeout_ms=opts.timeout_ms,
                            txn=client, transactional_id=tid, txn_timeout_ms=opts.txn_timeout_ms)
        try:
            producer.begin()
            send_batches(producer, opts, iterator)
            producer.flush()
            if opts.task_pause_ms:  # tests: a window with the transaction open
                time.sleep(opts.task_pause_ms / 1000)
            if opts.fail_task_once == (part, batch_id) and ctx.attemptNumber() == 0:
                raise InjectedTaskFailure(f"test.failTaskOnce: task {part} of micro-batch "
                                          f"{batch_id}, attempt 0, after writing "
                                          f"{producer.sent} records")
            return TxnTaskResult(producer.sent, tid, producer.producer_id,
                                 producer.producer_epoch, tuple(sorted(producer.partitions)))
        except BaseException:
            if producer.producer_id >= 0:
                try:
                    client.end_txn(tid, producer.producer_id, producer.producer_epoch, False)
                except (KafkaError, OSError) as e:  # the coordinator aborts it at its timeout
                    log.warning("could not abort transaction %r: %s", tid, e)
            raise
        finally:
            producer.close()
            client.close()

    # -- driver ---------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if batchId <= self.decided:
            return  # completed by _recover (the driver died after deciding it)
        txns = [m for m in messages if isinstance(m, TxnTaskResult) and m.transactional_id]
        client = TxnClient(self.opts.bootstrap_servers, self.opts.timeout_ms)
        try:
            for m in txns:  # all still open? (else nothing is decided: the batch fails whole)
                try:
                    client.add_partitions(m.transactional_id, m.producer_id, m.epoch,
                                          m.partitions)
                except KafkaError as e:
                    self._abort(client, txns)
                    raise KafkaError(
                        f"micro-batch {batchId}: transaction {m.transactional_id!r} is no longer "
                        f"open ({e}); nothing of the batch was committed. Is "
                        f"kafka.transaction.timeout.ms={self.opts.txn_timeout_ms} shorter than "
                        "a micro-batch?") from e
            decision = Decision(batchId, tuple((m.transactional_id, m.producer_id, m.epoch)
                                               for m in txns))
            DecisionLog(self.checkpoint).write(decision)
            _commit_all(client, batchId, decision.txns, self.opts.commit_pause_ms)
            DecisionLog(self.checkpoint).mark_done(batchId)
        finally:
            client.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        txns = [m for m in messages if isinstance(m, TxnTaskResult) and m.transactional_id]
        client = TxnClient(self.opts.bootstrap_servers, self.opts.timeout_ms)
        try:
            self._abort(client, txns)
        finally:
            client.close()

    @staticmethod
    def _abort(client: TxnClient, txns: list[TxnTaskResult]) -> None:
        for m in txns:
            try:
                client.end_txn(m.transactional_id, m.producer_id, m.epoch, commit=False)
            except KafkaError as e:  # already aborted (fenced, timed out): nothing to undo
                log.warning("abort of %r: %s", m.transactional_id, e)
