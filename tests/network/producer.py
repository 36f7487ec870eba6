"""The network tests' client: an idempotent acks=all confluent-kafka producer, run as its own
process inside a client host (``ip netns exec <ns> python -m tests.network.producer``).

It writes records ``nm-<partition>-<seq>`` round-robin over the partitions and reports every
delivery on stdout, one line each: ``a <partition> <offset> <seq>`` (acknowledged), ``u
<partition> <seq>`` (acknowledged without an offset), ``f <partition> <seq> <error>`` (failed).
Commands on stdin, one a line: ``pause`` (stop producing, wait for every outstanding delivery,
then print ``paused <left>``, the count still unreported), ``resume``, ``stop``."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from confluent_kafka import Producer

__all__ = ["PRODUCER_CONFIG", "value_of", "parse_value"]

# Short timeouts, so a request into a dead link is retried within seconds, not a minute; the
# message timeout is long, so no record fails while the cluster heals.
PRODUCER_CONFIG = {
    "acks": "all", "enable.idempotence": True, "linger.ms": 5,
    "message.timeout.ms": 300_000, "request.timeout.ms": 5000, "socket.timeout.ms": 5000,
    "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
    "socket.connection.setup.timeout.ms": 3000, "topic.metadata.refresh.interval.ms": 1000,
}


def value_of(partition: int, seq: int) -> bytes:
    return b"nm-%d-%09d" % (partition, seq)


def parse_value(value: bytes) -> tuple[int, int]:
    """(partition, seq) of a value made by :func:`value_of`."""
    _, p, s = value.split(b"-")
    return int(p), int(s)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--rate", type=float, default=300.0, help="records per second, all partitions")
    args = ap.parse_args()

    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def on_delivery(err, msg) -> None:
        p, seq = parse_value(msg.value())
        if err is not None:
            emit(f"f {p} {seq} {str(err).replace(chr(10), ' ')}")
        elif msg.offset() is None or msg.offset() < 0:
            emit(f"u {p} {seq}")
        else:
            emit(f"a {p} {msg.offset()} {seq}")

    producer = Producer({"bootstrap.servers": args.bootstrap, **PRODUCER_CONFIG})
    running = threading.Event()
    running.set()
    stopping = threading.Event()
    commands: list[str] = []
    cmd_lock = threading.Lock()

    def read_commands() -> None:
        for line in sys.stdin:
            with cmd_lock:
                commands.append(line.strip())
        with cmd_lock:
            commands.append("stop")

    threading.Thread(target=read_commands, daemon=True).start()
    seq = [0] * args.partitions
    i = 0
    interval = 1.0 / args.rate
    next_at = time.monotonic()
    while not stopping.is_set():
        with cmd_lock:
            todo, commands[:] = list(commands), []
        for cmd in todo:
            if cmd == "pause":
                running.clear()
                left = producer.flush(120)
                emit(f"paused {left}")
            elif cmd == "resume":
                running.set()
                next_at = time.monotonic()
            elif cmd == "stop":
                stopping.set()
        if not running.is_set() or stopping.is_set():
            producer.poll(0.05)
            continue
        now = time.monotonic()
        if now < next_at:
            producer.poll(min(next_at - now, 0.05))
            continue
        p = i % args.partitions
        try:
            producer.produce(args.topic, value_of(p, seq[p]), partition=p, on_delivery=on_delivery)
            seq[p] += 1
            i += 1
            next_at += interval
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(30)
    emit(f"stopped {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
