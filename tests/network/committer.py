"""The network tests' group offsets client: commits offsets for a consumer group, as its own
process inside a client host (``ip netns exec <ns> python -m tests.network.committer``).

It commits, one partition at a time round-robin, an offset one higher than the last it tried
for that partition (a standalone commit: generation -1, no member, as a consumer that assigns
its partitions itself commits), synchronously, and reports each on stdout: ``t <partition>
<offset>`` before the try, ``c <partition> <offset>`` once acknowledged, ``f <partition>
<offset> <error>`` when it failed, and ``i <partition> <offset>`` when it is indeterminate: it
failed, or took longer than socket.timeout.ms (a request of it timed out and librdkafka sent it
again on a new connection). An indeterminate commit may be applied at any later time, after later
commits were acknowledged too: the client closed the old connection, but TCP retransmits the
request after a heal and the broker reads it then for the first time — as on Kafka (nothing
orders requests across connections; a standalone commit is fenced by nothing). So the committed
offset of a partition must never be below its last acknowledged commit unless it is an
indeterminate one (counted apart), nor above its last try. Commands on stdin, one a line: ``pause`` (finish the commit
in flight, then print ``paused``), ``resume``, ``stop``."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

__all__ = ["COMMITTER_CONFIG"]

# Short timeouts, so a commit into a dead link fails or moves on within seconds
SOCKET_TIMEOUT_S = 5.0
COMMITTER_CONFIG = {
    "enable.auto.commit": False, "socket.timeout.ms": int(SOCKET_TIMEOUT_S * 1000), "retry.backoff.ms": 100,
    "reconnect.backoff.max.ms": 500, "socket.connection.setup.timeout.ms": 3000,
    "topic.metadata.refresh.interval.ms": 1000,
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--rate", type=float, default=10.0, help="commits per second")
    args = ap.parse_args()

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, **COMMITTER_CONFIG})
    running = threading.Event()
    running.set()
    stopping = threading.Event()
    idle = threading.Event()  # set while no commit is in flight and none will start

    def read_commands() -> None:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "pause":
                running.clear()
                idle.wait()
                emit("paused")
            elif cmd == "resume":
                running.set()
            elif cmd == "stop":
                break
        stopping.set()
        running.set()

    threading.Thread(target=read_commands, daemon=True).start()
    tried = [0] * args.partitions
    i = 0
    while not stopping.is_set():
        if not running.is_set():
            idle.set()
            running.wait()
            continue
        idle.clear()
        if not running.is_set():  # paused between the check and the clear
            continue
        p = i % args.partitions
        i += 1
        tried[p] += 1
        emit(f"t {p} {tried[p]}")
        started = time.monotonic()
        try:
            consumer.commit(offsets=[TopicPartition(args.topic, p, tried[p])], asynchronous=False)
            if time.monotonic() - started >= SOCKET_TIMEOUT_S:
                emit(f"i {p} {tried[p]}")
            emit(f"c {p} {tried[p]}")
        except KafkaException as e:
            emit(f"i {p} {tried[p]}")
            emit(f"f {p} {tried[p]} {str(e).replace(chr(10), ' ')}")
        time.sleep(1.0 / args.rate)
    idle.set()
    consumer.close()
    emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
