"""The disk worker: the only process that writes the partitions of one log.dir.

It recovers its log dir at start, registers every partition in the shared table, then loops:
wait on its doorbell, drain every request ring (one per network worker), apply each request to the
storage library (append / create / delete), post a completion, publish the new offsets under the
seqlock, and ring the network workers. Between rounds it runs the storage periodic work
(retention, flush policy, checkpoints) and stamps its heartbeat.

One writer per partition, one thread: no locks on the data path.
SIGTERM: finish the current round, close the log dir cleanly (flush, checkpoints, clean-shutdown
marker) and exit. SIGQUIT: exit at once (the next start recovers).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import socket
import time

from appliance.broker.exit_codes import EXIT_BOOT_ERROR
from appliance.broker.gc_policy import freeze_startup_objects
from appliance.broker.plumbing import Plumbing, drain_doorbell, ring_doorbell
from appliance.config import BrokerConfig, ConfigError, TopicConfig
from appliance.coordinator.routing import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG
from appliance.errors import ErrorCode, KafkaError, KafkaStorageError
from appliance.shm.layout import COMPLETION, GROUP_HEADER, REQUEST, MsgType, SlotState, WorkerState
from appliance.shm.partition_table import PartitionTable
from appliance.shm.ring import Channel, RingFormatError

__all__ = ["DiskWorker"]

log = logging.getLogger("appliance.disk")

ROUND_LIMIT = 256  # requests taken from one ring per round, so no network worker starves the others
IDLE_WAIT_S = 0.1  # the longest the loop sleeps: bounds heartbeat and periodic-task latency
DATA_BELL_INTERVAL_S = 0.001  # "new data" wake-ups for long polls: at most one per ms
_REQ = REQUEST.struct  # type: ignore[attr-defined]
_COMP = COMPLETION.struct  # type: ignore[attr-defined]
_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]


class DiskWorker:
    def __init__(self, index: int, path: str, config: BrokerConfig, plumbing: Plumbing) -> None:
        self.index = index
        self.path = path
        self.config = config
        self.plumbing = plumbing
        self.alive = True
        self.quit_now = False
        self.slot = plumbing.disk_slot(index)
        self.logs: dict[int, object] = {}  # table slot -> PartitionLog
        self._data_bell_pending = False
        self._last_data_bell = 0.0
        self.slot_of: dict[tuple[str, int], int] = {}

    # -- start ----------------------------------------------------------------------------
    def run(self) -> int:
        _name_process(f"appliance: disk worker {self.index} [{self.path}]")
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGQUIT, self._on_quit)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which stops us in order
        self.table = PartitionTable.attach(self.plumbing.table_name)
        self.channels = [Channel.attach(self.plumbing.channel_names[(n, self.index)])
                         for n in range(self.plumbing.num_net)]
        for ch in self.channels:
            # requests queued while no disk worker ran were failed by their network workers
            ch.requests.discard_all()
        self._attach_ipc()
        try:
            self._open_log_dir()
        except (OSError, KafkaStorageError) as e:
            log.error("log dir %s unusable: %s", self.path, e)
            return EXIT_BOOT_ERROR
        self.table.set_worker_state(self.slot, WorkerState.READY)
        self.table.heartbeat(self.slot)
        freeze_startup_objects()
        try:
            self._loop()
        finally:
            if not self.quit_now:
                self._shutdown()
        return 0

    def _open_log_dir(self) -> None:
        from appliance.storage.log_dir import LogDir
        started = time.monotonic()
        self.log_dir = LogDir.open(self.path, self.config, self._topic_config_for)
        with self.table.locked():
            for (topic, partition), plog in self.log_dir.partitions.items():
                slot = self.table.find(topic, partition)
                if slot < 0:
                    slot = self.table.allocate(topic, partition, self._num_partitions(topic),
                                               self.index, SlotState.OFFLINE)
                self._register(slot, topic, partition, plog)
            # slots assigned to this disk whose create request died with the previous worker
            for info in list(self.table.slots()):
                if info.disk == self.index and info.slot not in self.logs:
                    if info.state in (SlotState.CREATING, SlotState.OFFLINE):
                        plog = self.log_dir.create_partition(
                            info.topic, info.partition, self._creation_config(info.topic))
                        self._register(info.slot, info.topic, info.partition, plog)
                    elif info.state == SlotState.DELETING:
                        self.table.release(info.slot)
        self._start_coordinator()
        log.info("log dir %s open: %d partitions in %.2f s", self.path, len(self.logs),
                 time.monotonic() - started)

    # -- local IPC producers --------------------------------------------------------------
    def _attach_ipc(self) -> None:
        from appliance.shm.ipc_directory import IpcDirectory
        from appliance.shm.layout import IPC_CHANNELS, disk_wake_address, ipc_channel_name
        base = self.plumbing.base
        self.ipc_dir = IpcDirectory.attach(base, self.index)
        self.ipc_channels = [Channel.attach(ipc_channel_name(base, self.index, k))
                             for k in range(IPC_CHANNELS)]
        for ch in self.ipc_channels:
            # a producer fails what it queued for our dead predecessor (it watches the incarnation)
            ch.requests.discard_all()
        self.ipc_dir.set_worker_incarnation(self.table.worker(self.slot)[4])
        self.wake_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.wake_sock.bind(disk_wake_address(base, self.index))
        self.wake_sock.setblocking(False)

    def _drain_ipc(self) -> int:
        handled = 0
        for k, ch in enumerate(self.ipc_channels):
            ring = ch.requests
            if ring.head == ring.tail:
                continue
            answered = False
            for _ in range(ROUND_LIMIT):
                if ch.completions.capacity - ch.completions.used() < 4096:
                    # its producer is not reading its acknowledgements: leave its requests queued
                    # rather than block this worker (and every other producer) on it
                    break
                try:
                    msg = ring.peek()
                except RingFormatError as e:
                    log.warning("IPC channel %d: producer pid %d wrote garbage (%s): discarding its queue",
                                k, self.ipc_dir.slot(k)[0], e)
                    ring.discard_all()
                    break
                if msg is None:
                    break
                msg_type, payload = msg
                try:
                    comp = self._handle(None, msg_type, payload) if msg_type == MsgType.PRODUCE \
                        else self._refuse(payload)
                finally:
                    del payload
                    ring.release()
                handled += 1
                if comp is not None:
                    ch.completions.put(MsgType.COMPLETION, comp)  # room was checked above
                    answered = True
            if answered:
                self._wake_producer(k)
        return handled

    def _refuse(self, payload: memoryview) -> bytes:
        request_id, slot = _REQ.unpack_from(payload, 0)[:2] if len(payload) >= REQUEST.size else (0, -1)
        return _COMP.pack(request_id, -1, -1, -1, slot, int(ErrorCode.INVALID_REQUEST))

    def _wake_producer(self, k: int) -> None:
        pid, _, name = self.ipc_dir.slot(k)
        if pid and name:
            with contextlib.suppress(OSError):  # gone, or its socket buffer is full: it will poll
                self.wake_sock.sendto(b"\0", name)

    # -- the group coordinator ------------------------------------------------------------
    def _start_coordinator(self) -> None:
        from appliance.coordinator.coordinator import GroupCoordinator
        from appliance.shm.partition_index import PartitionIndex
        self._index = PartitionIndex(self.table)
        self.coordinator = GroupCoordinator(
            self.config, int(self.config["offsets.topic.num.partitions"]),
            append=self._append_offsets, respond=self._respond_later,
            partition_exists=lambda t, p: self._index.lookup(t, p) is not None)
        for (topic, partition), plog in self.log_dir.partitions.items():
            if topic == OFFSETS_TOPIC:
                self._load_offsets(partition, plog)

    def _load_offsets(self, partition: int, plog) -> None:
        from appliance.records.batch import decode_records
        def records():
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                data = plog.read_bytes(offset, 4 << 20, max_offset=plog.log_end_offset)
                if not data:
                    break
                batch = decode_records(data)
                yield from batch
                offset = max(offset + 1, batch[-1].offset + 1) if batch else plog.log_end_offset
        self.coordinator.load(partition, records())

    def _append_offsets(self, partition: int, batch: bytes) -> None:
        slot = self.slot_of.get((OFFSETS_TOPIC, partition))
        if slot is None:
            from appliance.errors import error_for_code
            raise error_for_code(ErrorCode.NOT_COORDINATOR)(f"{OFFSETS_TOPIC}-{partition} is not here")
        plog = self.logs[slot]
        plog.append(batch)
        plog.high_watermark = plog.log_end_offset
        self._publish(slot, plog)

    def _respond_later(self, token: tuple, body: dict) -> None:
        """Answer a group request the coordinator held (a JoinGroup waiting for a rebalance)."""
        n, request_id, api_key, api_version = token
        data = self._encode_group_response(api_key, api_version, body)
        comp = _COMP.pack(request_id, -1, -1, -1, -1, 0) + data
        ch = self.channels[n]
        while not ch.completions.put(MsgType.COMPLETION, comp):
            ring_doorbell(self.plumbing.net_bells[n])
            time.sleep(0.0005)
        ring_doorbell(self.plumbing.net_bells[n])

    @staticmethod
    def _encode_group_response(api_key: int, api_version: int, body: dict) -> bytes:
        from appliance.protocol.registry import API_BY_KEY
        return API_BY_KEY[api_key].encode_response(api_version, body)

    def _handle_group(self, n: int, request_id: int, body: memoryview) -> bytes:
        from appliance.protocol.registry import API_BY_KEY
        api_key, api_version, cid_len, host_len = _GROUP.unpack_from(body, 0)
        pos = GROUP_HEADER.size
        client_id = bytes(body[pos:pos + cid_len]).decode(errors="replace")
        pos += cid_len
        client_host = bytes(body[pos:pos + host_len]).decode(errors="replace")
        pos += host_len
        request = API_BY_KEY[api_key].decode_request(api_version, bytes(body[pos:]))
        token = (n, request_id, api_key, api_version)
        answer = self.coordinator.handle(api_key, api_version, request, token, client_id, client_host)
        return b"" if answer is None else self._encode_group_response(api_key, api_version, answer)

    def _creation_config(self, topic: str) -> TopicConfig:
        if topic == OFFSETS_TOPIC:
            return TopicConfig.from_overrides(self.config, OFFSETS_TOPIC_CONFIG)
        return self.config.topic_defaults()

    def _num_partitions(self, topic: str) -> int:
        """Partitions of a topic, counted over every log dir (a topic may span disks)."""
        count = 0
        for d in self.config.log_dirs:
            with contextlib.suppress(OSError):
                for name in os.listdir(d):
                    t, _, p = name.rpartition("-")
                    if t == topic and p.isdigit():
                        count = max(count, int(p) + 1)
        return max(count, 1)

    def _topic_config_for(self, topic: str) -> TopicConfig:
        return self.config.topic_defaults()

    def _register(self, slot: int, topic: str, partition: int, plog: object) -> None:
        # one broker: the leader is the whole ISR, so everything in its log is committed the
        # moment it leads (Kafka: the new leader's HW moves to min LEO of the ISR = its own)
        plog.high_watermark = plog.log_end_offset
        self.logs[slot] = plog
        self.slot_of[(topic, partition)] = slot
        self._publish(slot, plog)
        self.table.set_state(slot, SlotState.ONLINE)

    def _publish(self, slot: int, plog) -> None:
        self.table.publish(slot, plog.log_end_offset, plog.high_watermark, plog.log_start_offset)

    # -- loop -----------------------------------------------------------------------------
    def _on_term(self, signum, frame) -> None:
        self.alive = False

    def _on_quit(self, signum, frame) -> None:
        self.quit_now = True
        os._exit(0)

    def _loop(self) -> None:
        bell = self.plumbing.disk_bells[self.index]
        poller = select.poll()
        poller.register(bell, select.POLLIN)
        poller.register(self.wake_sock, select.POLLIN)
        next_periodic = 0.0
        while self.alive:
            busy = self._drain_rings()
            try:
                next_ms = self.coordinator.poll()
            except Exception:  # a coordinator bug must not take the partitions of this disk down
                log.exception("group coordinator timers failed")
                next_ms = int(time.time() * 1000) + 100
            if not busy:
                wait_ms = min(IDLE_WAIT_S * 1000, max(next_ms - int(time.time() * 1000), 0))
                if self._data_bell_pending:
                    wait_ms = min(wait_ms, DATA_BELL_INTERVAL_S * 1000)
                events: list = []
                with contextlib.suppress(InterruptedError):
                    events = poller.poll(wait_ms)
                # read only what fired: each empty read is a syscall per wake-up
                for fd, _ in events:
                    if fd == bell:
                        drain_doorbell(bell)
                    else:
                        with contextlib.suppress(BlockingIOError, OSError):
                            while self.wake_sock.recv(64):
                                pass
            self._ring_data_bells()
            now = time.monotonic()
            self.table.heartbeat(self.slot)
            if now >= next_periodic:
                self._periodic()
                # while the cleaner has work, step it often (each step is bounded to ~50 ms)
                cleaner = getattr(self.log_dir, "cleaner", None)
                next_periodic = now + (0.02 if cleaner is not None and cleaner.busy else 0.25)

    def _periodic(self) -> None:
        try:
            self.log_dir.run_periodic(int(time.time() * 1000))
        except Exception:
            log.exception("periodic log maintenance failed")
        for slot, plog in self.logs.items():  # retention may have moved log start offsets
            lso = plog.log_start_offset
            if self.table.offsets(slot)[2] != lso:
                self._publish(slot, plog)

    def _drain_rings(self) -> bool:
        """One round over every ring. True if any request was handled."""
        handled = 0
        rung = set()
        held: list[tuple[int, bytes]] = []  # create completions: sent once the round is durable
        for n, ch in enumerate(self.channels):
            ring = ch.requests
            for _ in range(ROUND_LIMIT):
                try:
                    msg = ring.peek()
                except RingFormatError as e:
                    log.error("request ring of network worker %d is corrupt (%s): discarding it", n, e)
                    ring.discard_all()
                    break
                if msg is None:
                    break
                msg_type, payload = msg
                try:
                    comp = self._handle(n, msg_type, payload)
                finally:
                    del payload
                    ring.release()
                handled += 1
                if comp is not None and msg_type == MsgType.CREATE_PARTITION:
                    held.append((n, comp))
                elif comp is not None:
                    self._complete(n, comp)
                    rung.add(n)
        if held:
            error = self._sync_created()
            for n, comp in held:
                if error:
                    comp = _with_error(comp, error)
                self._complete(n, comp)
                rung.add(n)
        handled += self._drain_ipc()
        if handled:
            self._data_bell_pending = True
        # requesters learn of their completions at once; one bell per worker serves both the
        # completions and the "new data" wake-up (each eventfd write that wakes a process costs
        # 3-20 us here, and as many context switches)
        self._ring_data_bells(rung)
        return handled > 0

    def _complete(self, n: int, comp: bytes) -> None:
        ch = self.channels[n]
        while not ch.completions.put(MsgType.COMPLETION, comp):
            # the network worker drains completions constantly; wait for room
            ring_doorbell(self.plumbing.net_bells[n])
            time.sleep(0.0005)

    def _sync_created(self) -> int:
        """Make this round's new partitions durable; the Kafka error code if that failed."""
        self.table.heartbeat(self.slot)  # a round of creates can take seconds on a slow disk
        try:
            self.log_dir.sync_created()
        except KafkaStorageError as e:
            log.error("%s", e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return 0

    def _ring_data_bells(self, rung: set[int] | tuple = ()) -> None:
        """Ring the network workers in ``rung`` and, when due, every network worker: appends
        wake long-poll fetches on every network worker, coalesced to one wake-up per
        DATA_BELL_INTERVAL_S (measured: ringing after every round cost 15 % of the worker under
        a stream of large batches)."""
        now = time.monotonic()
        if self._data_bell_pending and now - self._last_data_bell >= DATA_BELL_INTERVAL_S:
            for fd in self.plumbing.net_bells:
                ring_doorbell(fd)
            self._data_bell_pending = False
            self._last_data_bell = now
            return
        for n in rung:
            ring_doorbell(self.plumbing.net_bells[n])

    def _handle(self, n: int, msg_type: int, payload: memoryview) -> bytes | None:
        request_id, slot, acks, flags, timeout_ms = _REQ.unpack_from(payload, 0)
        body = payload[REQUEST.size:]
        base_offset = log_append_time = -1
        log_start = -1
        error = ErrorCode.NONE
        extra = b""
        try:
            if msg_type == MsgType.GROUP:
                extra = self._handle_group(n, request_id, body)
                if not extra:
                    return None  # held by the coordinator; answered by _respond_later
            elif msg_type == MsgType.PRODUCE:
                plog = self.logs.get(slot)
                if plog is None:
                    raise _NotHere()
                info = plog.append(body)
                if info.duplicate:
                    # a retry of a batch already in the log: acknowledge its original offsets
                    log.debug("duplicate batch for slot %d at offset %d", slot, info.first_offset)
                base_offset = info.first_offset
                log_append_time = info.log_append_time
                log_start = plog.log_start_offset
                plog.high_watermark = plog.log_end_offset  # one broker: the leader is the ISR
                self._publish(slot, plog)
            elif msg_type == MsgType.CREATE_PARTITION:
                self._create(slot, json.loads(bytes(body)))
            elif msg_type == MsgType.DELETE_PARTITION:
                self._delete(slot)
            elif msg_type == MsgType.ALTER_CONFIG:
                self._alter(slot, json.loads(bytes(body)))
            else:
                error = ErrorCode.INVALID_REQUEST
        except _NotHere:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        except KafkaError as e:
            error = e.code
        except OSError as e:
            log.error("I/O error on %s: %s", self.path, e)
            error = ErrorCode.KAFKA_STORAGE_ERROR
        except Exception:
            log.exception("request type %d for slot %d failed", msg_type, slot)
            error = ErrorCode.UNKNOWN_SERVER_ERROR
        if acks == 0 and msg_type == MsgType.PRODUCE:
            return None
        return _COMP.pack(request_id, base_offset, log_append_time, log_start, slot, int(error)) + extra

    def _create(self, slot: int, spec: dict) -> None:
        info = self.table.read(slot)
        if info.disk != self.index or info.state not in (SlotState.CREATING, SlotState.ONLINE):
            raise _NotHere()
        if slot in self.logs:
            return
        try:
            cfg = TopicConfig.from_overrides(self.config, spec.get("configs", {}))
        except ConfigError:
            cfg = self.config.topic_defaults()  # validated by the network worker already
        # made durable with the rest of the round's creates, before any of them is answered
        plog = self.log_dir.create_partition(info.topic, info.partition, cfg, durable=False)
        self._register(slot, info.topic, info.partition, plog)
        self.table.heartbeat(self.slot)
        if info.topic == OFFSETS_TOPIC:
            self.coordinator.load(info.partition, ())

    def _delete(self, slot: int) -> None:
        self.table.heartbeat(self.slot)  # a round of deletes can take seconds on a slow disk
        info = self.table.read(slot)
        plog = self.logs.pop(slot, None)
        if plog is not None:
            self.slot_of.pop((info.topic, info.partition), None)
            self.log_dir.delete_partition(info.topic, info.partition)
        with self.table.locked():
            self.table.release(slot)

    def _alter(self, slot: int, spec: dict) -> None:
        plog = self.logs.get(slot)
        if plog is None:
            raise _NotHere()
        cfg = TopicConfig.from_overrides(self.config, spec.get("configs", {}))
        self.log_dir.update_topic_config(plog.topic, cfg)

    def _shutdown(self) -> None:
        self.table.set_worker_state(self.slot, WorkerState.STOPPING)
        for slot in self.logs:
            self.table.set_state(slot, SlotState.OFFLINE)
        try:
            self.log_dir.close(clean=True)
            log.info("log dir %s closed cleanly", self.path)
        except Exception:
            log.exception("clean close of %s failed; the next start will recover it", self.path)
        self.table.set_worker_state(self.slot, WorkerState.DEAD)



class _NotHere(Exception):
    """The slot is not (or no longer) a partition of this disk worker."""


def _with_error(comp: bytes, error: int) -> bytes:
    """``comp`` with its error code replaced (the body after the fixed part is kept)."""
    fields = list(_COMP.unpack_from(comp, 0))
    fields[-1] = int(error)
    return _COMP.pack(*fields) + comp[_COMP.size:]


def _name_process(title: str) -> None:
    try:
        import setproctitle
        setproctitle.setproctitle(title)
    except ImportError:
        pass
