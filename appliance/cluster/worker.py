"""The cluster worker: one process per broker in cluster mode (zookeeper.connect set).

It owns the ZooKeeper session (kazoo, imported only here, after the supervisor's fork), the
broker's registration, the controller role when elected (:class:`ClusterMember`), the
:class:`LeadershipTable`, and the replica fetcher. It is one more ring client of every disk
worker (ring index ``num_net``), so it creates, truncates and appends through the rings like
a network worker does.

The network workers hand it, over an abstract Unix stream socket
(:mod:`appliance.process.cluster_link`), the controller's LeaderAndIsr / StopReplica /
UpdateMetadata and the clients' Metadata, CreateTopics, ElectLeaders and the reassignment APIs
(45, 46); it answers with encoded bodies. Config changes of this broker's clients come the same
way and go to ZooKeeper; every broker applies them from /config/changes (:mod:`config_changes`).
So do the network workers' asks for a block of producer ids (:mod:`producer_id_blocks`).

Exit codes: 3 when the broker cannot join (broker.id registered by another live broker,
ZooKeeper unreachable past zookeeper.connection.timeout.ms, or the id taken while this
broker's session had expired): the supervisor halts instead of respawning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import setproctitle

from appliance.cluster.acl_store import (
    AclMirror,
    create_acls_body,
    delete_acls_body,
    describe_acls_body,
)
from appliance.cluster.broker_answers import (
    coordinator_body,
    create_partitions_body,
    create_topics_body,
    delete_topics_body,
    describe_cluster_body,
    metadata_body,
)
from appliance.cluster.broker_connection import BrokerConnector
from appliance.cluster.config_changes import ConfigChanges
from appliance.cluster.controlled_shutdown import answer_shutdown, request_shutdown
from appliance.cluster.elect_leaders import answer_elect_leaders
from appliance.cluster.fetcher import ReplicaFetcher
from appliance.cluster.isr_manager import IsrManager
from appliance.cluster.leadership import partition_states
from appliance.cluster.local_replicas import LocalReplicas
from appliance.cluster.member import ClusterMember
from appliance.cluster.previous_session import close_previous_session, save_session
from appliance.cluster.producer_id_blocks import BlockAllocator
from appliance.cluster.reassignment_api import answer_alter_reassignments, answer_list_reassignments
from appliance.cluster.registry import BrokerIdInUse
from appliance.cluster.replication_throttle import ThrottleSettings, publish_leader_throttles
from appliance.cluster.scram_users import alter_scram_body, describe_scram_body
from appliance.cluster.session_fence import SessionFence
from appliance.cluster.topic_ids import TopicIds
from appliance.cluster.wire_channel import WireChannel
from appliance.cluster.zk_paths import split_chroot
from appliance.cluster.zk_session import ZooKeeperUnreachable, open_session
from appliance.cluster.zk_store import ZkStore
from appliance.config import BrokerConfig
from appliance.errors import ErrorCode
from appliance.metrics.recorder import Recorder, attach_recorder
from appliance.process.cluster_link import (
    CONFIG_REQUEST,
    LENGTH,
    PRODUCER_ID_BLOCK_REQUEST,
    Forwarded,
    read_forwarded,
)
from appliance.process.disk_client import DiskClient
from appliance.process.event_loop import run_event_loop
from appliance.process.exit_codes import EXIT_BOOT_ERROR, EXIT_OK
from appliance.process.plumbing import Plumbing
from appliance.process.producer_ids import take_first_block
from appliance.process.ring_context import RingContext
from appliance.process.stop_deadlines import CLUSTER_LEAVE_S
from appliance.protocol.messages import (
    AlterPartitionReassignments,
    CreatePartitions,
    CreateTopics,
    DeleteTopics,
    DescribeCluster,
    ElectLeaders,
    FindCoordinator,
    ListPartitionReassignments,
    Metadata,
)
from appliance.protocol.messages.cluster import (
    ControlledShutdown,
    LeaderAndIsr,
    StopReplica,
    UpdateMetadata,
)
from appliance.protocol.messages.security import (
    AlterUserScramCredentials,
    CreateAcls,
    DeleteAcls,
    DescribeAcls,
    DescribeUserScramCredentials,
)
from appliance.protocol.schema import ApiMessage
from appliance.shm.layout import WorkerState, cluster_address, leaders_name, metadata_name
from appliance.shm.leadership_area import LeadershipArea
from appliance.shm.metadata_cache import MetadataCache, from_states
from appliance.shm.partition_table import PartitionTable
from appliance.storage.broker_racks import write_broker_racks

__all__ = ["ClusterWorker"]

log = logging.getLogger("appliance.cluster")

_PREVIOUS_SESSION_MAX_S = 40.0  # ZooKeeper's default maxSessionTimeout (20 ticks of 2 s)
_THROTTLE_PUBLISH_S = 0.5  # a throttle set or removed reaches the leaders' fetch answers this late

# an answer: (the decoded request, its version) -> the response body
Answer = Callable[[Any, Forwarded], Awaitable[dict]]  # (decoded request, its head)


class ClusterWorker:
    def __init__(self, config: BrokerConfig, plumbing: Plumbing, log_dirs: list[str]) -> None:
        self.config = config
        self.plumbing = plumbing
        self.metrics: Recorder | None = None  # when metrics are on, once joined
        self.log_dirs = log_dirs
        self.slot = plumbing.cluster_slot()
        self.broker_id = int(config["broker.id"])

    def run(self) -> int:
        setproctitle.setproctitle(f"appliance: cluster worker [broker {self.broker_id}]")
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return run_event_loop(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, lambda: self._on_sigterm(loop))
        loop.add_signal_handler(signal.SIGQUIT, lambda: os._exit(0))
        p = self.plumbing
        self.table = table = PartitionTable.attach(p.table_name)
        area = LeadershipArea.attach(leaders_name(p.base))
        self.metadata = MetadataCache.attach(metadata_name(p.base))
        disks = DiskClient(p.cluster_index, p, table)
        self.ctx = ctx = RingContext(p.cluster_index, self.config, table, disks, self.log_dirs)
        loop.add_reader(p.net_bells[p.cluster_index], ctx.wakeups.on_doorbell)
        # every connection to another broker goes through this: its inter-broker listener
        self.connector = BrokerConnector.from_config(self.config)
        self.member = ClusterMember.from_config(self.config, WireChannel(
            client_id=f"controller-{self.broker_id}", connector=self.connector,
            request_timeout_s=int(self.config["controller.socket.timeout.ms"]) / 1000))
        self.replicas: LocalReplicas | None = None
        self.answers = self._answers()
        self.configs: ConfigChanges | None = None
        self.producer_ids: BlockAllocator | None = None  # once joined
        self.session_fence: SessionFence | None = None  # once joined
        # bound here: uvloop takes no abstract address (a leading NUL) as a path
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(cluster_address(p.base))
        server = await asyncio.start_unix_server(self._serve, sock=listener)
        beat = asyncio.ensure_future(self._heartbeat(table, disks))
        join = asyncio.ensure_future(self._join(loop))
        stopping = asyncio.ensure_future(self.stop.wait())
        # a stop while ZooKeeper is out of reach must not wait out zookeeper.connection.timeout.ms
        # (the supervisor SIGKILLs it 35 s after its SIGTERM): the join's blocking calls run in an
        # executor thread, which the event loop's end would join, so leave at once
        await asyncio.wait([join, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not join.done():
            log.info("stopping before the cluster was joined")
            table.set_worker_state(self.slot, WorkerState.DEAD)
            os._exit(EXIT_OK)
        try:
            join.result()
        except (BrokerIdInUse, ZooKeeperUnreachable) as e:
            log.error("broker %d cannot join the cluster: %s", self.broker_id, e)
            print(f"error: {e}", file=sys.stderr, flush=True)
            beat.cancel()
            server.close()
            return EXIT_BOOT_ERROR
        store = ZkStore(self.member.client)
        self.store = store
        self.session_fence = SessionFence(self.member.client, self.member.registry, self.metadata)
        self.throttle = ThrottleSettings(self.member.client, self.broker_id)
        self.fetcher = ReplicaFetcher(ctx, store, self.broker_id, self.throttle, self.connector)
        self.topic_ids = TopicIds(store)
        self.replicas = LocalReplicas(ctx, self.member.leadership, area, store, self.fetcher,
                                      self.topic_ids)
        self.metrics = attach_recorder(self.config, self.plumbing.base, self.slot)
        isr = IsrManager(ctx, self.member.leadership, area, store, self.replicas.lock, self.metrics)
        isr_task = asyncio.ensure_future(isr.run())
        self.configs = ConfigChanges(ctx, store, self.broker_id)
        config_task = asyncio.ensure_future(self.configs.run())
        acl_task = asyncio.ensure_future(AclMirror(self.member.client, self.log_dirs[0]).run())
        throttle_task = asyncio.ensure_future(self._publish_leader_throttles(area))
        self.producer_ids = BlockAllocator(self.member.client, self.broker_id)
        # Kafka's broker takes its first block at start: ids even while ZooKeeper is away
        producer_ids_task = asyncio.ensure_future(take_first_block(table, self.producer_ids.allocate))
        table.set_worker_state(self.slot, WorkerState.READY)
        log.info("broker %d joined the cluster", self.broker_id)
        code = EXIT_OK
        saved = None
        while not self.stop.is_set():
            # kept current: after an expiry kazoo holds a new session, the one to close next time
            if (session := self.member.client.client_id) is not None and session != saved:
                save_session(self.log_dirs[0], self.broker_id, *session)
                saved = session
            if self.member.fatal.is_set():
                log.error("leaving: %s", self.member.fatal_error)
                code = EXIT_BOOT_ERROR
                break
            try:
                await asyncio.wait_for(self.stop.wait(), 0.25)
            except TimeoutError:
                pass
        reachable = self.member.client.connected
        if code == EXIT_OK and bool(self.config["controlled.shutdown.enable"]) and not reachable:
            # the controller is found through ZooKeeper and must write there: no try can succeed
            log.warning("controlled shutdown skipped: ZooKeeper is out of reach")
        elif code == EXIT_OK and bool(self.config["controlled.shutdown.enable"]):
            # leadership moves while this broker still serves: producers see retriable errors only
            await loop.run_in_executor(None, lambda: request_shutdown(
                self.member, store, self.broker_id, self.connector,
                attempts=int(self.config["controlled.shutdown.max.retries"]),
                backoff_s=int(self.config["controlled.shutdown.retry.backoff.ms"]) / 1000))
        self.fetcher.stop()
        isr_task.cancel()
        config_task.cancel()
        acl_task.cancel()
        throttle_task.cancel()
        producer_ids_task.cancel()
        server.close()
        reachable = reachable and self.member.client.connected
        try:
            if reachable:
                await loop.run_in_executor(None, self.member.stop)
            else:  # asks nothing of ZooKeeper; the executor's threads may all be blocked in kazoo
                self.member.stop(reachable=False)
        except Exception as e:  # ZooKeeper gone meanwhile: the session expires by itself
            log.warning("leaving ZooKeeper failed: %s", str(e) or type(e).__name__)
        self.member.channel.close()
        beat.cancel()
        table.set_worker_state(self.slot, WorkerState.DEAD)
        if not reachable:
            # threads still blocked in kazoo calls (ISR upkeep, a producer id block) would hold
            # the event loop's end until kazoo's retries ran out: nothing of theirs is owed
            logging.shutdown()
            os._exit(code)
        return code

    def _on_sigterm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop; and leave by itself CLUSTER_LEAVE_S after the SIGTERM, whatever still waits on
        ZooKeeper or a peer (a frozen ensemble, a dead controller), before the supervisor's
        SIGKILL at CLUSTER_STOP_BY_S: the exit is its own, logged, and clean for the supervisor."""
        if not self.stop.is_set():
            loop.call_later(CLUSTER_LEAVE_S, self._leave_now)
        self.stop.set()

    def _leave_now(self) -> None:
        log.warning("leaving: ZooKeeper or a peer did not answer within %.0f s of the stop; the "
                    "session expires by itself", CLUSTER_LEAVE_S)
        self.table.set_worker_state(self.slot, WorkerState.DEAD)
        logging.shutdown()
        os._exit(EXIT_OK)

    async def _join(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the membership. The session of this broker's previous life (a SIGKILL, a
        crashed cluster worker), recorded in its log dir, is closed first, so its registration
        and its /controller are gone at once (:mod:`previous_session`). If broker.id is still
        held by a session registered with our own listener (no record: a first start after an
        upgrade, or the close failed), wait for ZooKeeper to expire it rather than refuse to
        start. Another broker's: raise."""
        settings = self.member.settings
        await loop.run_in_executor(None, close_previous_session, self.log_dirs[0], self.broker_id,
                                   split_chroot(settings.connect)[0], settings.session_timeout_ms,
                                   settings.connection_timeout_ms / 1000)
        # the previous life may have run with a longer session than ours (up to ZooKeeper's
        # maxSessionTimeout, 40 s by default): wait out the longer of the two, twice
        longest_s = max(settings.session_timeout_ms / 1000, _PREVIOUS_SESSION_MAX_S)
        deadline = loop.time() + 2 * longest_s + 10
        while True:
            try:
                await loop.run_in_executor(None, self.member.start)
                return
            except BrokerIdInUse:
                holder = await loop.run_in_executor(None, self._registration)
                mine = (self.member.info.host, self.member.info.port)
                # None: the old session expired between our attempt and this look: try again
                if holder not in (mine, None) or loop.time() > deadline:
                    raise
                log.info("broker.id %d is still held by this broker's previous session: waiting "
                         "for ZooKeeper to expire it", self.broker_id)
                await asyncio.sleep(1.0)

    async def _publish_leader_throttles(self, area: LeadershipArea) -> None:
        """The leader side of the replication throttle: each led partition's rate into the
        leadership area, where the network workers serving followers' fetches read it."""
        me = self.broker_id
        while True:
            try:
                led = []
                for tp, held in list(self.member.leadership.local.items()):
                    info = self.ctx.index.lookup(tp.topic, tp.partition) if held.leader == me else None
                    if info is not None:
                        led.append((tp, info.slot))
                publish_leader_throttles(self.throttle, led, area)
            except Exception:
                log.exception("publishing the leader replication throttles failed")
            await asyncio.sleep(_THROTTLE_PUBLISH_S)

    def _registration(self) -> tuple[str, int] | None:
        client = open_session(self.member.settings)
        try:
            b = ZkStore(client).brokers().get(self.broker_id)
            return (b.host, b.port) if b is not None else None
        finally:
            client.stop()
            client.close()

    async def _heartbeat(self, table: PartitionTable, disks: DiskClient) -> None:
        while True:
            table.heartbeat(self.slot)
            disks.check_disks()
            if self.metrics is not None:  # ActiveControllerCount: 1 on the active controller only
                controller = self.member.controller
                self.metrics.active_controller(controller is not None and controller.active)
            await asyncio.sleep(0.25)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (n,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
                frame = await reader.readexactly(n)
                head = read_forwarded(frame)
                if head.api_key == CONFIG_REQUEST:
                    body = await self._config_request(frame[head.body_at:])
                elif head.api_key == PRODUCER_ID_BLOCK_REQUEST:
                    if self.producer_ids is None:  # not joined yet: a closed link, retriable
                        raise ConnectionError("not joined yet")
                    body = await self.producer_ids.answer(frame[head.body_at:])
                else:
                    body = await self._answer(head, frame)
                writer.write(LENGTH.pack(len(body)) + body)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the network worker went away, or we are stopping
        except Exception:
            log.exception("serving a forwarded request failed")
        finally:
            writer.close()

    async def _config_request(self, data: bytes) -> bytes:
        if self.configs is None:  # not joined yet: a closed link, retriable for the client
            raise ConnectionError("not joined yet")
        req = json.loads(data)
        if req.get("op") == "read":
            config = await self.configs.read_topic(req["entity_name"])
            return json.dumps({"error_code": 0, "error_message": None, "config": config}).encode()
        code, message = await self.configs.write(req["entity_type"], req["entity_name"], req["config"])
        return json.dumps({"error_code": int(code), "error_message": message}).encode()

    def _answers(self) -> dict[int, tuple[type[ApiMessage], Answer]]:
        """Every API this worker answers over the cluster link: its schema and its answer."""
        lt = self.member.leadership
        return {
            LeaderAndIsr.API_KEY: (LeaderAndIsr, self._leader_and_isr),
            StopReplica.API_KEY: (StopReplica, self._stop_replica),
            UpdateMetadata.API_KEY: (UpdateMetadata, self._update_metadata),
            ControlledShutdown.API_KEY: (ControlledShutdown, lambda r, h: answer_shutdown(self.member, r)),
            ElectLeaders.API_KEY: (ElectLeaders, lambda r, h: answer_elect_leaders(self.member, r)),
            AlterPartitionReassignments.API_KEY: (
                AlterPartitionReassignments, lambda r, h: answer_alter_reassignments(self.member, r)),
            ListPartitionReassignments.API_KEY: (
                ListPartitionReassignments, lambda r, h: answer_list_reassignments(self.member, r)),
            FindCoordinator.API_KEY: (
                FindCoordinator, lambda r, h: coordinator_body(lt, self.store, self.config, r, h.api_version, h.listener)),
            Metadata.API_KEY: (
                Metadata, lambda r, h: metadata_body(lt, self.store, self.config, r, h.api_version, self.topic_ids, h.listener)),
            CreateTopics.API_KEY: (CreateTopics, lambda r, h: create_topics_body(lt, self.store, self.config, r)),
            CreatePartitions.API_KEY: (
                CreatePartitions, lambda r, h: create_partitions_body(lt, self.store, self.config, r)),
            DeleteTopics.API_KEY: (DeleteTopics, lambda r, h: delete_topics_body(self.store, self.config, r)),
            DescribeCluster.API_KEY: (DescribeCluster, lambda r, h: describe_cluster_body(lt, self.store, h.listener)),
            DescribeUserScramCredentials.API_KEY: (
                DescribeUserScramCredentials, lambda r, h: describe_scram_body(self.store, r)),
            AlterUserScramCredentials.API_KEY: (
                AlterUserScramCredentials, lambda r, h: alter_scram_body(self.store, r)),
            DescribeAcls.API_KEY: (DescribeAcls, lambda r, h: describe_acls_body(self.member.client, self.config, r)),
            CreateAcls.API_KEY: (CreateAcls, lambda r, h: create_acls_body(self.member.client, self.config, r)),
            DeleteAcls.API_KEY: (DeleteAcls, lambda r, h: delete_acls_body(self.member.client, self.config, r)),
        }

    async def _answer(self, head: Forwarded, frame: bytes) -> bytes:
        if self.replicas is None:  # not joined yet: the controller retries on a closed link
            raise ConnectionError("not joined yet")
        found = self.answers.get(head.api_key)
        if found is None:
            raise ConnectionError(f"API {head.api_key} is not served by the cluster worker")
        api, answer = found
        req = api.decode_request(head.api_version, frame, head.body_at)
        return api.encode_response(head.api_version, await answer(req, head))

    def _stale(self, req: Any) -> dict | None:
        """KIP-380: a controller request meant for an older registration of this broker (its
        session has expired since) changes nothing."""
        epoch = getattr(req, "broker_epoch", -1)
        if self.session_fence is None or not self.session_fence.stale(epoch):
            return None
        log.info("refused a controller request for broker epoch %d (this registration's is %d)",
                 epoch, self.member.registry.epoch)
        return {"error_code": int(ErrorCode.STALE_BROKER_EPOCH), "partition_errors": []}

    async def _leader_and_isr(self, req: Any, head: Forwarded) -> dict:
        if (stale := self._stale(req)) is not None:
            return stale
        async with self.replicas.lock:
            resp, changes = self.member.leadership.apply_leader_and_isr(req)
            touched = [tp for tp, _ in partition_states(req, "topic_states", "ungrouped_partition_states")]
            if not resp["error_code"]:
                await self.replicas.apply(changes, touched)
                if self.session_fence is not None:
                    self.session_fence.confirmed(getattr(req, "broker_epoch", -1))
        return resp

    async def _stop_replica(self, req: Any, head: Forwarded) -> dict:
        if (stale := self._stale(req)) is not None:
            return stale
        async with self.replicas.lock:
            resp, changes = self.member.leadership.apply_stop_replica(req)
            await self.replicas.stop(changes)
        return resp

    async def _update_metadata(self, req: Any, head: Forwarded) -> dict:
        if (stale := self._stale(req)) is not None:
            return {"error_code": stale["error_code"]}
        lt = self.member.leadership
        resp = lt.apply_update_metadata(req)
        if not resp["error_code"]:
            # before the answer: the controller's next step may count on every worker here
            # knowing what it just said
            self.metadata.publish(from_states(
                (tp.topic, tp.partition, s.leader, s.leader_epoch) for tp, s in lt.metadata.items()))
            # the network workers' follower fetching (KIP-392) needs the other brokers' racks
            write_broker_racks(self.log_dirs[0], {b: rack for b, (_, _, rack) in lt.live_brokers.items()})
        return resp
