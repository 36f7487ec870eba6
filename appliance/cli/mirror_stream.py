"""One MirrorMaker stream: a consumer in the source cluster's group and a producer to the target.

Built on confluent-kafka (librdkafka): the fastest correct client here — fetching, batching,
compression and retries run in C threads, and Python only hands each record from one to the other.

Delivery: the consumer never auto-commits. Every ``commit_interval`` (and before partitions are
revoked) the stream flushes its producer — waits until every record handed to it is acknowledged
by the target — and only then commits the positions it has handed over. A crash therefore loses
nothing; records acknowledged after the last commit are mirrored again after a restart (the only
source of duplicates). The producer retries without a time limit (``message.timeout.ms=0``), so an
unreachable target stalls the stream instead of failing records; a record the target refuses for
good (e.g. too large) stops the stream without committing it (Kafka's abort.on.send.failure).

Not thread-safe: one stream per thread.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["MirrorStream", "StreamFailed", "compile_whitelist", "compile_blacklist"]

log = logging.getLogger("appliance.mirror")

LAG_EVERY_S = 1.0  # how often a stream publishes its partitions' lag to the metrics
BATCH = 10_000  # records per consume() call: amortises the call, bounded memory
COMPLAIN_EVERY_S = 10.0  # how often an unreachable cluster is reported


class StreamFailed(Exception):
    """The target refused a record for good; nothing after the last commit was committed."""


def _topic_regex(raw: str, flag: str) -> str:
    text = raw.strip().strip("'\"").replace(" ", "")
    if text == "*":
        text = ".*"
    text = text.replace(",", "|")
    try:
        re.compile(text)
    except re.error as e:
        raise ValueError(f"{flag} {raw!r} is not a regular expression: {e}") from None
    return text


def compile_whitelist(raw: str) -> re.Pattern[str]:
    """Kafka's whitelist: a Java regex over topic names; ',' also separates alternatives, quotes
    and spaces are stripped, and a lone '*' means every topic. Raises ValueError naming it."""
    return re.compile(_topic_regex(raw, "--whitelist"))


def compile_blacklist(raw: str) -> re.Pattern[str]:
    """0.8's blacklist, written as the whitelist is: every topic its regex does not match, as one
    pattern the streams use like a whitelist (fullmatch). Raises ValueError naming it."""
    return re.compile(f"(?!(?:{_topic_regex(raw, '--blacklist')})$).*")


class _Complainer:
    """Rate-limited, clear messages about an unreachable cluster (librdkafka reports every retry)."""

    def __init__(self, what: str, servers: str, say: Callable[[str], None]) -> None:
        self.what, self.servers, self.say = what, servers, say
        self.last = 0.0
        self.down_since: float | None = None

    def error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() not in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                              KafkaError._RESOLVE, KafkaError._TIMED_OUT):
            self.say(f"{self.what} cluster ({self.servers}): {err.str()}")
            return
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
        if now - self.last >= COMPLAIN_EVERY_S:
            self.last = now
            self.say(f"{self.what} cluster unreachable ({self.servers}) for {now - self.down_since:.0f} s: "
                     f"{err.str()}; retrying, nothing is lost")

    def ok(self) -> None:
        if self.down_since is not None:
            self.say(f"{self.what} cluster ({self.servers}) reachable again")
            self.down_since = None


class MirrorStream:
    """Consume ``whitelist`` topics of the source as group member, produce them to the target."""

    def __init__(self, index: int, consumer_conf: dict[str, Any], producer_conf: dict[str, Any],
                 whitelist: re.Pattern[str], commit_interval_s: float, topic_refresh_s: float,
                 report_interval_s: float, stop: threading.Event, say: Callable[[str], None],
                 metrics: Any = None) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        self.index = index
        self.say = say
        self.whitelist = whitelist
        self.commit_interval_s = commit_interval_s
        self.topic_refresh_s = topic_refresh_s
        self.report_interval_s = report_interval_s
        self.stop = stop
        self.src_down = _Complainer("source", consumer_conf.get("bootstrap.servers", "?"), say)
        self.dst_down = _Complainer("target", producer_conf.get("bootstrap.servers", "?"), say)
        self.failure: str | None = None
        self.consumer = Consumer({**consumer_conf, "error_cb": self.src_down.error})
        self.producer = Producer({**producer_conf, "error_cb": self.dst_down.error,
                                  "on_delivery": self._on_delivery,
                                  "delivery.report.only.error": True})
        self.admin = AdminClient({k: v for k, v in producer_conf.items()
                                  if k in ("bootstrap.servers", "metadata.broker.list", "client.id")})
        self.topics: list[str] = []
        self.pending: dict[tuple[str, int], int] = {}  # next offset to commit, handed to the producer
        self.mirrored = 0
        self.metrics = metrics  # a MirrorMetrics when --metrics.listener is given
        self.client_id = str(consumer_conf.get("client.id", f"stream-{index}"))
        self.last_lag = 0.0
        self.last_report = (time.monotonic(), 0)

    # -- delivery -------------------------------------------------------------------------
    def _on_delivery(self, err: Any, msg: Any) -> None:
        # only failures are reported (delivery.report.only.error); retries are unlimited, so a
        # failure is one the target will never accept
        if err is not None and self.failure is None:
            self.failure = (f"the target refused a record of {msg.topic()}: {err.str()}; stopping "
                            f"without committing it (fix the target, then restart)")

    def _flush(self) -> None:
        """Wait until the target acknowledged everything handed over (or the stream stops)."""
        since = last_said = time.monotonic()
        while len(self.producer) > 0:
            self.producer.flush(1.0)
            now = time.monotonic()
            if now - last_said >= COMPLAIN_EVERY_S and len(self.producer) > 0:
                last_said = now
                self.say(f"stream {self.index}: waiting {now - since:.0f} s for the target to acknowledge "
                         f"{len(self.producer)} records before committing")
            if self.failure:
                raise StreamFailed(self.failure)
            if self.stop.is_set() and len(self.producer) > 0 and self.dst_down.down_since is not None:
                return  # stopping while the target is down: commit nothing more, replay later
        if self.failure:
            raise StreamFailed(self.failure)
        self.dst_down.ok()

    def _commit(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        self._flush()
        if not self.pending or len(self.producer) > 0:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in self.pending.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
            self.pending.clear()
            if self.metrics is not None:
                self.metrics.commits.inc()
        except KafkaException as e:  # e.g. a rebalance: these records are replayed, not lost
            if self.metrics is not None:
                self.metrics.commit_failures.inc()
            self.say(f"stream {self.index}: offset commit failed ({e}); the records will be mirrored again")

    # -- subscription ---------------------------------------------------------------------
    def _refresh_topics(self) -> None:
        from confluent_kafka import KafkaException

        try:
            md = self.consumer.list_topics(timeout=5)
        except KafkaException as e:
            self.src_down.error(e.args[0])
            return
        self.src_down.ok()
        wanted = sorted(t for t, m in md.topics.items()
                        if not t.startswith("__") and m.error is None and self.whitelist.fullmatch(t))
        if wanted == self.topics:
            return
        new = [t for t in wanted if t not in self.topics]
        self._create_on_target({t: (len(md.topics[t].partitions),
                                    max(len(md.topics[t].partitions[0].replicas), 1)) for t in new})
        self.say(f"stream {self.index}: mirroring {', '.join(wanted) or 'no topics'}")
        self.topics = wanted
        if wanted:
            self.consumer.subscribe(wanted, on_revoke=self._on_revoke, on_lost=self._on_lost)
        else:
            self.consumer.unsubscribe()

    def _create_on_target(self, partitions: dict[str, tuple[int, int]]) -> None:
        """A new topic gets the source's partition count on the target, so a key lands on the
        same partition number on both sides (same partitioner); existing topics are left alone."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        if not partitions:
            return
        futures = self.admin.create_topics([NewTopic(t, n, rf) for t, (n, rf) in partitions.items()],
                                           operation_timeout=30)
        for topic, fut in futures.items():
            try:
                fut.result(60)
                self.say(f"created {topic} on the target with {partitions[topic][0]} partitions")
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    self.say(f"could not create {topic} on the target ({e.args[0].str()}); "
                             "producing relies on the target's auto-creation")

    def _on_revoke(self, consumer: Any, partitions: list) -> None:
        # what was handed over must be acknowledged and committed before another member resumes
        try:
            self._commit()
        except StreamFailed:
            pass  # run() reports it
        self.pending.clear()

    def _on_lost(self, consumer: Any, partitions: list) -> None:
        self.pending.clear()  # the group moved on: commits would be refused; they are replayed

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        """Mirror until ``stop`` is set. Raises StreamFailed."""
        last_refresh = last_commit = 0.0
        produce = self.producer.produce
        poll = self.producer.poll
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now - last_refresh >= self.topic_refresh_s:
                    self._refresh_topics()
                    last_refresh = now
                if not self.topics:
                    self.stop.wait(min(1.0, self.topic_refresh_s))
                    continue
                msgs = self.consumer.consume(BATCH, 0.5)
                pending = self.pending
                counts: dict[str, list[int]] = {}  # topic -> [records, bytes], for the metrics
                for m in msgs:
                    if m.error() is not None:
                        self._consume_error(m.error())
                        continue
                    while True:
                        try:
                            produce(m.topic(), m.value(), m.key(), timestamp=m.timestamp()[1],
                                    headers=m.headers())
                            break
                        except BufferError:  # the target is slow or down: wait for room
                            poll(0.5)
                            if self.failure:
                                raise StreamFailed(self.failure) from None
                    pending[(m.topic(), m.partition())] = m.offset() + 1
                    if self.metrics is not None:
                        c = counts.get(m.topic())
                        if c is None:
                            c = counts[m.topic()] = [0, 0]
                        c[0] += 1
                        c[1] += len(m.value() or b"") + len(m.key() or b"")
                if msgs:
                    self.mirrored += len(msgs)
                    self.src_down.ok()
                if counts:
                    self.metrics.mirrored(counts)
                if self.metrics is not None and time.monotonic() - self.last_lag >= LAG_EVERY_S:
                    self.last_lag = time.monotonic()
                    lags = self.partition_lags()
                    if lags is not None:
                        self.metrics.set_lag(self.client_id, lags)
                poll(0)
                if self.failure:
                    raise StreamFailed(self.failure)
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self._commit()
                    last_commit = time.monotonic()
                self._maybe_report()
            self._commit()
        finally:
            self.consumer.close()

    def _consume_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() == KafkaError._PARTITION_EOF:
            return
        self.src_down.error(err)

    def _maybe_report(self) -> None:
        now = time.monotonic()
        t0, n0 = self.last_report
        if now - t0 < self.report_interval_s:
            return
        self.last_report = (now, self.mirrored)
        lag = self.lag()
        self.say(f"stream {self.index}: {self.mirrored} records mirrored, "
                 f"{(self.mirrored - n0) / (now - t0):.0f}/s, lag {'?' if lag is None else lag}, "
                 f"{len(self.producer)} awaiting acknowledgement")

    def lag(self) -> int | None:
        """Records of the assigned partitions not consumed yet (from the last fetch responses)."""
        lags = self.partition_lags()
        return None if lags is None else sum(lags.values())

    def partition_lags(self) -> dict[tuple[str, int], int] | None:
        """Per assigned partition with a known position: high watermark minus position."""
        try:
            lags = {}
            for tp in self.consumer.position(self.consumer.assignment()):
                _, high = self.consumer.get_watermark_offsets(tp, cached=True)
                if high >= 0 and tp.offset >= 0:
                    lags[(tp.topic, tp.partition)] = max(high - tp.offset, 0)
            return lags
        except Exception:
            return None
