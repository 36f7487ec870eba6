"""LogDir: every partition of one ``log.dir`` (one disk), its checkpoints and periodic tasks.

On open: read the three checkpoint files and the clean-shutdown marker, delete the marker (so a
crash from now on is detected at the next start), open and recover every ``<topic>-<partition>``
directory, and remove directories of deleted topics (``<topic>-<p>.<uuid>-delete``).

Per-topic configuration: each partition directory holds the topic's overrides in
``topic.properties`` so that a restarted disk worker knows them. Kafka keeps them in ZooKeeper;
we keep them next to the data because the standalone appliance has no ZooKeeper.

Thread-safety: none; the disk worker of this log dir is the only user (single writer).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from appliance.config import BrokerConfig, TopicConfig, parse_properties, validate_topic_name
from appliance.errors import (
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from appliance.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    read_checkpoint,
    sync_filesystem,
    write_checkpoint,
)
from appliance.storage.cleaner import LogCleaner
from appliance.storage.file_remover import FileRemover
from appliance.storage.flush import WRITEBACK_CHUNKED, choose_writeback_mode
from appliance.storage.log import (
    PartitionLog,
    parse_partition_dir_name,
    partition_dir_name,
    wall_ms,
)
from appliance.storage.partition_metadata import PARTITION_METADATA_FILE, write_topic_id
from appliance.storage.segment import SEGMENT_SUFFIXES, segment_file_name

__all__ = ["LogDir", "CLEAN_SHUTDOWN_FILE", "TOPIC_PROPERTIES_FILE", "DELETE_DIR_SUFFIX",
           "RELEASE_CHECK_INTERVAL_MS", "SYNCFS_MIN_PARTITIONS"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanShutdown"
TOPIC_PROPERTIES_FILE = "topic.properties"
DELETE_DIR_SUFFIX = "-delete"
#: How long a close waits for queued removals (what is left, the next start removes): well
#: inside the supervisor's 30 s for a graceful stop, beside the flush and checkpoints.
REMOVER_CLOSE_WAIT_S = 10.0
#: How often run_periodic looks for idle inactive segments whose files it can close.
RELEASE_CHECK_INTERVAL_MS = 10_000
#: Above this many partitions a clean close syncs the file system once (syncfs) instead of
#: fsyncing each partition's files (measured: 4-5 fsyncs of ~3 ms each per partition).
SYNCFS_MIN_PARTITIONS = 64
#: How often a long open logs its progress ("loaded N/M partitions in dir D").
PROGRESS_LOG_S = 5.0


def _escape_prop(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def read_topic_properties(part_dir: str) -> dict[str, str]:
    """The overrides saved in a partition directory ({} when none)."""
    try:
        with open(os.path.join(part_dir, TOPIC_PROPERTIES_FILE), encoding="utf-8") as f:
            return parse_properties(f.read())
    except FileNotFoundError:
        return {}


def write_topic_properties(part_dir: str, overrides: dict[str, str], sync: bool = True) -> None:
    """Replace ``topic.properties`` atomically (``sync=False``: the caller fsyncs it later)."""
    path = os.path.join(part_dir, TOPIC_PROPERTIES_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={_escape_prop(v)}\n" for k, v in sorted(overrides.items())))
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove_new_partition_dir(part_dir: str) -> None:
    """Remove a partition dir whose creation failed. Out of descriptors (EMFILE), rmtree
    cannot list it, so the files creation makes are unlinked by name (no descriptor needed)."""
    shutil.rmtree(part_dir, ignore_errors=True)
    if not os.path.exists(part_dir):
        return
    names = [TOPIC_PROPERTIES_FILE, TOPIC_PROPERTIES_FILE + ".tmp",
             PARTITION_METADATA_FILE, PARTITION_METADATA_FILE + ".tmp"]
    names += [segment_file_name(0, s) for s in SEGMENT_SUFFIXES]
    for name in names:
        try:
            os.unlink(os.path.join(part_dir, name))
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("%s: cannot remove %s after a failed creation: %s", part_dir, name, e)
    try:
        os.rmdir(part_dir)
    except OSError as e:
        log.error("%s: cannot remove the half-made partition dir: %s", part_dir, e)


class LogDir:
    """All partitions stored in one log directory.

    Attributes: ``path``, ``partitions`` ((topic, partition) -> PartitionLog),
    ``had_clean_shutdown``, ``writeback_mode`` and ``writeback_reason``.
    """

    def __init__(self, path: str, broker_config: BrokerConfig,
                 topic_configs: Callable[[str], TopicConfig], now_ms: Callable[[], int]) -> None:
        self.path = path
        self.broker_config = broker_config
        self.topic_configs = topic_configs
        self.partitions: dict[tuple[str, int], PartitionLog] = {}
        self._now_ms = now_ms
        self.had_clean_shutdown = False
        self._unsynced: list[str] = []  # partition dirs created with durable=False
        self.writeback_mode = "os"
        self.writeback_reason = ""
        self.checkpointed_high_watermarks: dict[tuple[str, int], int] = {}
        self._config_cache: dict[tuple, TopicConfig] = {}
        self._chunk: int | None = None
        self._window = 0
        self.cleaner: LogCleaner | None = None
        # deleted partitions and expired segments are removed off the loop (file_remover.py)
        self.remover = FileRemover(path)
        now = now_ms()
        self._last = {"retention": now, "recovery_cp": now, "start_cp": now, "hw_cp": now,
                      "flush": now, "release": now}

    @classmethod
    def open(cls, path: str, broker_config: BrokerConfig,
             topic_configs: Callable[[str], TopicConfig] | None = None, *,
             now_ms: Callable[[], int] = wall_ms,
             progress: Callable[[int, int], None] | None = None) -> LogDir:
        """Open (creating) the log dir and recover its partitions.

        ``topic_configs(topic)`` gives a topic's config; by default the broker's topic defaults
        plus the ``topic.properties`` overrides saved in the partition directory. The
        partitions are opened by ``num.recovery.threads.per.data.dir`` threads (their time is
        mostly waiting for the disk); ``progress(loaded, total)`` is called from this thread
        as they finish, and a line is logged every PROGRESS_LOG_S.
        Raises KafkaStorageError on I/O failure.
        """
        if topic_configs is None:
            topic_configs = lambda topic: broker_config.topic_defaults()  # noqa: E731
        self = cls(path, broker_config, topic_configs, now_ms)
        try:
            os.makedirs(path, exist_ok=True)
            self._open(progress)
        except OSError as e:
            self.close(clean=False)
            raise KafkaStorageError(f"cannot open log dir {path}: {e}") from e
        return self

    def _config_for(self, topic: str, part_dir: str) -> TopicConfig:
        overrides = read_topic_properties(part_dir)
        if overrides:
            # every partition of a topic saves the same overrides: parse them once
            key = tuple(sorted(overrides.items()))
            cfg = self._config_cache.get(key)
            if cfg is None:
                cfg = self._config_cache[key] = TopicConfig.from_overrides(self.broker_config, overrides)
            return cfg
        return self.topic_configs(topic)

    def _open(self, progress: Callable[[int, int], None] | None = None) -> None:
        marker = os.path.join(self.path, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = os.path.exists(marker)
        rp = read_checkpoint(os.path.join(self.path, RECOVERY_POINT_CHECKPOINT))
        hw = read_checkpoint(os.path.join(self.path, REPLICATION_OFFSET_CHECKPOINT))
        log_start = read_checkpoint(os.path.join(self.path, LOG_START_OFFSET_CHECKPOINT))
        if self.had_clean_shutdown:
            os.unlink(marker)
            fsync_dir(self.path)
        mode, reason = choose_writeback_mode(self.path, self.broker_config["log.writeback.mode"])
        self.writeback_mode, self.writeback_reason = mode, reason
        log.info("%s: write-back mode %s (%s)", self.path, mode, reason)
        self._chunk = (int(self.broker_config["log.writeback.chunk.bytes"])
                       if mode == WRITEBACK_CHUNKED else None)
        self._window = int(self.broker_config["log.writeback.window.bytes"])
        jobs: list[tuple[tuple[str, int], str]] = []
        for name in sorted(os.listdir(self.path)):
            full = os.path.join(self.path, name)
            if not os.path.isdir(full):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("%s: removing deleted partition dir %s", self.path, name)
                self.remover.remove([full])
                continue
            tp = parse_partition_dir_name(name)
            if tp is None:
                log.warning("%s: ignoring directory %s (not <topic>-<partition>)", self.path, name)
                continue
            jobs.append((tp, full))

        def load(job: tuple[tuple[str, int], str]) -> PartitionLog:
            tp, full = job
            return self.open_log(full, self._config_for(tp[0], full), recovery_point=rp.get(tp, 0),
                                 log_start_offset=log_start.get(tp, 0),
                                 clean_shutdown=self.had_clean_shutdown)

        self._load_partitions(jobs, load, progress)
        # Single broker: the HW follows the LEO; replication reads the checkpointed value here.
        self.checkpointed_high_watermarks = hw
        self.cleaner = LogCleaner(self.path, self.broker_config)

    def _load_partitions(self, jobs: list, load: Callable[[Any], PartitionLog],
                         progress: Callable[[int, int], None] | None) -> None:
        """Open every partition of ``jobs`` with ``load`` in a pool of threads (the time goes to
        reads of cold files and fsyncs, which release the GIL; Kafka's recovery threads). All
        or nothing: the partitions opened are kept in ``self.partitions`` (so close() closes
        them) and the first error is raised once every thread has finished."""
        total = len(jobs)
        threads = max(1, min(int(self.broker_config["num.recovery.threads.per.data.dir"]), total))
        started = last_log = time.monotonic()
        opened: dict[tuple[str, int], PartitionLog] = {}
        first_error: BaseException | None = None
        with ThreadPoolExecutor(threads, thread_name_prefix="recovery") as pool:
            futures = {pool.submit(load, job): job[0] for job in jobs}
            for done, fut in enumerate(as_completed(futures), 1):
                try:
                    opened[futures[fut]] = fut.result()
                except BaseException as e:  # noqa: BLE001 - re-raised below, after the others
                    first_error = first_error or e
                now = time.monotonic()
                if progress is not None:
                    progress(done, total)
                if now - last_log >= PROGRESS_LOG_S and done < total:
                    last_log = now
                    log.info("loaded %d/%d partitions in dir %s (%.0f s)", done, total, self.path,
                             now - started)
        for tp, _ in jobs:  # in name order, as listed
            if tp in opened:
                self.partitions[tp] = opened[tp]
        if first_error is not None:
            raise first_error

    # -- partitions -------------------------------------------------------------------------

    def create_partition(self, topic: str, partition: int, config: TopicConfig,
                         durable: bool = True, topic_id: bytes | None = None) -> PartitionLog:
        """Create an empty partition (its dir and first segment) with ``config``; the config's
        overrides are saved in ``topic.properties``, ``topic_id`` (when given) in
        ``partition.metadata``. ``durable=False`` leaves the fsyncs to
        :meth:`sync_created`, which makes a whole batch of new partitions durable at once.
        Raises InvalidTopicError, TopicAlreadyExistsError, KafkaStorageError."""
        validate_topic_name(topic)
        if partition < 0:
            raise UnknownTopicOrPartitionError(f"partition {partition} of {topic} is negative")
        key = (topic, partition)
        if key in self.partitions:
            raise TopicAlreadyExistsError(f"partition {topic}-{partition} already exists in {self.path}")
        part_dir = os.path.join(self.path, partition_dir_name(topic, partition))
        try:
            os.makedirs(part_dir, exist_ok=False)
        except FileExistsError:
            raise TopicAlreadyExistsError(f"directory {part_dir} already exists") from None
        except OSError as e:
            raise KafkaStorageError(f"cannot create {part_dir}: {e}") from e
        plog = None
        try:
            write_topic_properties(part_dir, config.to_properties(), sync=durable)
            if topic_id is not None:
                write_topic_id(part_dir, topic_id, sync=durable)
            plog = self.open_log(part_dir, config, clean_shutdown=True)
            if durable:
                fsync_dir(part_dir)
                fsync_dir(self.path)
        except (OSError, KafkaStorageError) as e:
            # all or nothing: a half-made partition dir would be loaded at the next start
            if plog is not None:
                plog.close()
            _remove_new_partition_dir(part_dir)
            if isinstance(e, KafkaStorageError):
                raise
            raise KafkaStorageError(f"cannot create {part_dir}: {e}") from e
        if not durable:
            self._unsynced.append(part_dir)
        self.partitions[key] = plog
        return plog

    def sync_created(self) -> None:
        """fsync what :meth:`create_partition` left unsynced: each new ``topic.properties``, its
        directory, then the log dir once. Measured: two fsyncs per partition made a 1,000-partition
        topic take 12-49 s on a spinning disk; after the first fsync has committed the journal, the
        rest find little left to write. Raises KafkaStorageError."""
        pending, self._unsynced = self._unsynced, []
        if not pending:
            return
        try:
            for part_dir in pending:
                for name in (TOPIC_PROPERTIES_FILE, PARTITION_METADATA_FILE):
                    try:
                        fd = os.open(os.path.join(part_dir, name), os.O_RDONLY)
                    except FileNotFoundError:  # no topic id given at creation
                        continue
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                fsync_dir(part_dir)
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"cannot sync new partitions in {self.path}: {e}") from e

    def update_topic_config(self, topic: str, config: TopicConfig) -> None:
        """Apply a new config to every partition of ``topic`` here and save its overrides."""
        for (t, _), plog in self.partitions.items():
            if t == topic:
                plog.config = config
                write_topic_properties(plog.path, config.to_properties())

    def open_log(self, path: str, config: TopicConfig, *, recovery_point: int = 0,
                 log_start_offset: int = 0, clean_shutdown: bool = False) -> PartitionLog:
        """PartitionLog.open of ``path`` with this dir's clock, write-back settings and
        remover. Raises what PartitionLog.open raises."""
        return PartitionLog.open(path, config, recovery_point=recovery_point,
                                 log_start_offset=log_start_offset, clean_shutdown=clean_shutdown,
                                 now_ms=self._now_ms, writeback_chunk_bytes=self._chunk,
                                 writeback_window_bytes=self._window,
                                 remove_files=self.remover.remove)

    def delete_partition(self, topic: str, partition: int) -> None:
        """Close the partition and rename its dir to ``<topic>-<p>.<uuid>-delete``; the remover
        thread removes it (or the next open, after a crash). Raises UnknownTopicOrPartitionError
        and KafkaStorageError."""
        plog = self.partitions.pop((topic, partition), None)
        if plog is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not in {self.path}")
        if self.cleaner is not None:
            self.cleaner.forget((topic, partition))
        plog.close()
        target = f"{plog.path}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            os.rename(plog.path, target)
            fsync_dir(self.path)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete {plog.path}: {e}") from e
        self.remover.remove([target])

    # -- checkpoints and periodic work ------------------------------------------------------

    def write_checkpoints(self) -> None:
        """Write the recovery point, high watermark and log start offset checkpoints."""
        self._write_recovery_points()
        self._write_start_offsets()
        self._write_high_watermarks()

    def _write_recovery_points(self) -> None:
        write_checkpoint(os.path.join(self.path, RECOVERY_POINT_CHECKPOINT),
                         {k: p.recovery_point for k, p in self.partitions.items()})

    def _write_high_watermarks(self) -> None:
        write_checkpoint(os.path.join(self.path, REPLICATION_OFFSET_CHECKPOINT),
                         {k: p.high_watermark for k, p in self.partitions.items()})

    def _write_start_offsets(self) -> None:
        write_checkpoint(os.path.join(self.path, LOG_START_OFFSET_CHECKPOINT),
                         {k: p.log_start_offset for k, p in self.partitions.items()})

    def run_periodic(self, now_ms: int) -> None:
        """Retention (every log.retention.check.interval.ms), flush policy (every
        log.flush.scheduler.interval.ms), checkpoints (recovery points, high watermarks and log
        start offsets, each at its key's interval), purge of expired ``.deleted`` files, closing idle inactive segments' files
        and giving back idle active segments' reserved blocks (every RELEASE_CHECK_INTERVAL_MS),
        one bounded step of the log cleaner (see :mod:`appliance.storage.cleaner`;
        ``self.cleaner.busy`` says a pass is under way). Call it often (e.g. every 100 ms)."""
        bc = self.broker_config
        last = self._last
        if now_ms - last["retention"] >= int(bc["log.retention.check.interval.ms"]):
            last["retention"] = now_ms
            for plog in self.partitions.values():
                plog.apply_retention(now_ms)
        # Kafka's log flusher: the time rule (flush.ms) is checked every
        # log.flush.scheduler.interval.ms -- never at its default, as in Kafka; flush.messages
        # is checked at each append (PartitionLog)
        if now_ms - last["flush"] >= int(bc["log.flush.scheduler.interval.ms"]):
            last["flush"] = now_ms
            for plog in self.partitions.values():
                plog.maybe_flush(now_ms)
        for plog in self.partitions.values():
            plog.purge_deleted(now_ms)
        if now_ms - last["release"] >= RELEASE_CHECK_INTERVAL_MS:
            # descriptors scale with partitions, not segments: idle inactive segments close
            last["release"] = now_ms
            for plog in self.partitions.values():
                plog.release_idle_segments()
                plog.give_back_idle_reservation()
        if now_ms - last["recovery_cp"] >= int(bc["log.flush.offset.checkpoint.interval.ms"]):
            last["recovery_cp"] = now_ms
            self._write_recovery_points()
        if now_ms - last["hw_cp"] >= int(bc["replica.high.watermark.checkpoint.interval.ms"]):
            last["hw_cp"] = now_ms
            self._write_high_watermarks()
        if now_ms - last["start_cp"] >= int(bc["log.flush.start.offset.checkpoint.interval.ms"]):
            last["start_cp"] = now_ms
            self._write_start_offsets()
        if self.cleaner is not None:
            self.cleaner.run(self.partitions, now_ms)

    def close(self, clean: bool = True) -> None:
        """Flush every partition (clean), write checkpoints, close, then write the
        clean-shutdown marker (clean only, and only if everything before it succeeded); then
        wait up to REMOVER_CLOSE_WAIT_S for queued removals.

        With more than SYNCFS_MIN_PARTITIONS partitions the flush is one syncfs(2) of the log
        dir's file system after every partition is closed, not an fsync per file."""
        ok = True
        if self.cleaner is not None:
            self.cleaner.close()
        one_sync = clean and len(self.partitions) > SYNCFS_MIN_PARTITIONS
        if one_sync:
            # closing trims each active segment's indexes (ftruncate, final time-index entry):
            # ~3.5 ms per partition here, so the recovery threads share it
            threads = int(self.broker_config["num.recovery.threads.per.data.dir"])
            with ThreadPoolExecutor(max(1, threads), thread_name_prefix="close") as pool:
                futures = {pool.submit(plog.close): plog for plog in self.partitions.values()}
                for fut in as_completed(futures):
                    if fut.exception() is not None:
                        ok = False
                        log.error("%s: close at shutdown failed: %s", futures[fut].path,
                                  fut.exception())
        for plog in self.partitions.values():
            try:
                if clean and not one_sync:
                    plog.flush()
            except KafkaStorageError as e:
                ok = False
                log.error("%s: flush at shutdown failed: %s", plog.path, e)
            plog.close()  # idempotent: a no-op after the threads closed it
        if one_sync:
            try:
                sync_filesystem(self.path)
                for plog in self.partitions.values():
                    plog.recovery_point = plog.log_end_offset  # everything is on disk now
            except OSError as e:
                ok = False
                log.error("%s: sync at shutdown failed: %s", self.path, e)
        if clean and ok:
            self.write_checkpoints()
            with open(os.path.join(self.path, CLEAN_SHUTDOWN_FILE), "w"):
                pass
            fsync_dir(self.path)
        self.remover.shutdown(REMOVER_CLOSE_WAIT_S)

    def __getitem__(self, key: tuple[str, int]) -> PartitionLog:
        return self.partitions[key]

    def info(self) -> dict[str, Any]:
        return {"path": self.path, "partitions": len(self.partitions),
                "writeback": self.writeback_mode, "writeback_reason": self.writeback_reason,
                "clean_shutdown": self.had_clean_shutdown}
