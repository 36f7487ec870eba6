"""A consume-transform-produce loop with exactly-once output, run as its own process by the
SIGKILL campaigns (test_eos_loop_sigkill.py).

    python -m tests.transactions.eos_loop BOOTSTRAP INPUT OUTPUT GROUP TXN_ID END0,END1,... [WORK_MS]

A confluent-kafka consumer (read_committed, group GROUP, no auto commit) reads INPUT's
partitions from the group's committed offsets; a transactional producer (transactional.id
TXN_ID, fixed: a restarted instance fences the last one and aborts its open transaction) writes
each record's transform (``b"out-" + value``) to the same partition of OUTPUT, then
``send_offsets_to_transaction(consumer.position(...), consumer_group_metadata())`` and commits.
With WORK_MS, each transaction's records are flushed to the broker and the loop works
WORK_MS more before it commits (a transform that takes time): a kill then most often meets an
open transaction whose records are written. It exits 0 once its positions reach END0,END1,... (the input's end offsets) with everything
committed, and with 1 on any error: the campaign restarts it, as a supervisor restarts a crashed
service, and the new instance's init_transactions aborts whatever the old one left open.

Partitions are assigned, not subscribed: a SIGKILLed member of a subscribed group holds its
partitions until its session times out (6 s at the least), twenty times over; the offsets are
the group's all the same. It prints ``ready`` once initialised and ``committed N`` after each
commit (flushed: the campaign reads them).
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

__all__ = ["transform", "main"]

BATCH = 50  # records per transaction
TIMEOUT_S = 20.0


def transform(value: bytes) -> bytes:
    """The output record of one input record."""
    return b"out-" + value


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(bootstrap: str, source: str, sink: str, group: str, txn_id: str, ends: list[int],
        work_ms: int = 0) -> None:
    # no re-bootstrap when every broker is down (the broker campaign's single broker):
    # librdkafka 2.16's re-bootstrap decommissions the broker handles, and a
    # send_offsets_to_transaction then waits forever (past its timeout) on the decommissioned
    # group coordinator, its handle spinning in TERMINATE (librdkafka issue #5511, seen here)
    common = {"bootstrap.servers": bootstrap, "metadata.recovery.strategy": "none"}
    producer = Producer({**common, "transactional.id": txn_id, "linger.ms": 5, "transaction.timeout.ms": 60000})
    consumer = Consumer({**common, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 50})
    try:
        # fences the previous instance and aborts its open transaction (its offsets too), so
        # the committed offsets read next are stable
        producer.init_transactions(TIMEOUT_S)
        parts = [TopicPartition(source, p) for p in range(len(ends))]
        start = consumer.committed(parts, TIMEOUT_S)
        for tp in start:
            if tp.error is not None:
                raise RuntimeError(f"committed offset of {tp}: {tp.error}")
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
        consumer.assign(start)
        position = {tp.partition: max(tp.offset, 0) for tp in start}
        _say("ready")
        committed = 0
        while any(position[p] < end for p, end in enumerate(ends)):
            batch = consumer.consume(BATCH, 0.5)
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                if m.error() is not None:
                    raise RuntimeError(f"consume: {m.error()}")
                producer.produce(sink, transform(m.value()), m.key(), partition=m.partition())
            if work_ms:
                producer.flush(TIMEOUT_S)
                time.sleep(work_ms / 1000)
            producer.send_offsets_to_transaction(consumer.position(parts), consumer.consumer_group_metadata(),
                                                 TIMEOUT_S)
            producer.commit_transaction(TIMEOUT_S)
            for m in batch:
                position[m.partition()] = max(position[m.partition()], m.offset() + 1)
            committed += len(batch)
            _say(f"committed {committed}")
    finally:
        consumer.close()


def main(argv: list[str]) -> int:
    bootstrap, source, sink, group, txn_id, ends, *work = argv
    try:
        run(bootstrap, source, sink, group, txn_id, [int(e) for e in ends.split(",")], int(work[0]) if work else 0)
    except Exception as e:  # crash-only: the campaign restarts the process
        _say(f"error {type(e).__name__}: {e}")
        return 1
    _say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
