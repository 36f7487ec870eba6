"""One broker's membership in the cluster: its ZooKeeper session, its registration, its
controller candidacy and its :class:`LeadershipTable`. The cluster worker (phase 2) owns one
:class:`ClusterMember`; until then ``python -m appliance.cluster.member`` runs one on its own,
with the controller's requests printed as JSON lines instead of sent (for tools and tests).

Exit codes of the module form: 0 after SIGTERM/SIGINT, 3 when the broker cannot join (its id
is registered by another broker, or ZooKeeper is unreachable): the supervisor's "cannot boot".

Thread-safety: :meth:`start` and :meth:`stop` from one thread; the controller runs its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import socket
import sys
import threading
from typing import Any

from appliance.cluster.controller import Controller
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.registry import BrokerIdInUse, BrokerRegistry
from appliance.cluster.request_batch import BrokerChannel
from appliance.cluster.zk_paths import BrokerInfo
from appliance.cluster.zk_session import ZkSettings, ZooKeeperUnreachable, open_session

__all__ = ["ClusterMember", "PrintChannel", "EXIT_CANNOT_JOIN", "main", "broker_info_from_config"]

log = logging.getLogger(__name__)

EXIT_CANNOT_JOIN = 3  # the supervisor's "could not boot": halt, do not respawn


class PrintChannel(BrokerChannel):
    """Writes each controller request as one JSON line (broker, api_key, version, body) to a
    stream; answers StopReplica with success so topic deletion completes. For observing a
    controller without brokers, never for serving."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self._lock = threading.Lock()

    def add_broker(self, broker: BrokerInfo) -> None:
        pass

    def remove_broker(self, broker_id: int) -> None:
        pass

    def send(self, broker_id, api_key, api_version, body, on_response=None) -> None:
        with self._lock:
            self.stream.write(json.dumps({"broker": broker_id, "api_key": api_key,
                                          "api_version": api_version, "body": body}) + "\n")
            self.stream.flush()
        if on_response is not None:
            on_response(broker_id, {"error_code": 0, "partition_errors": [
                {"topic_name": t["name"], "partition_index": p, "error_code": 0}
                for t in body.get("topics", []) for p in t["partition_indexes"]]})


def broker_info_from_config(config: Any) -> BrokerInfo:
    """The registration of a broker from its BrokerConfig: broker.id, every listener's
    advertised endpoint with its security protocol (Kafka's "endpoints" and
    "listener_security_protocol_map"; an empty host means this machine's name, as
    Kafka does), broker.rack, and as the legacy host and port the first of them."""
    eps = [dataclasses.replace(e, host=_named(e.host)) for e in config.advertised_endpoints]
    return BrokerInfo(config["broker.id"], eps[0].host, eps[0].port,
                      endpoints=tuple(str(e) for e in eps),
                      security_protocol_map={e.listener: e.security_protocol for e in eps},
                      rack=config["broker.rack"] or None)


def _named(host: str) -> str:
    return host or socket.getfqdn()


class ClusterMember:
    """Joins the cluster on :meth:`start`; leaves (resigning, unregistering) on :meth:`stop`.

    ``fatal`` is set if the membership breaks for good while running (the id was taken by
    another broker after a session expiry); the owner should then exit with code 3.
    """

    def __init__(self, settings: ZkSettings, info: BrokerInfo, channel: BrokerChannel, **controller_kw: Any) -> None:
        self.settings = settings
        self.info = info
        self.channel = channel
        self.controller_kw = controller_kw
        self.leadership = LeadershipTable(info.broker_id)
        self.fatal = threading.Event()
        self.fatal_error: Exception | None = None
        self.client = None
        self.registry: BrokerRegistry | None = None
        self.controller: Controller | None = None

    @classmethod
    def from_config(cls, config: Any, channel: BrokerChannel) -> ClusterMember:
        """From a :class:`appliance.config.BrokerConfig` with zookeeper.connect set."""
        return cls(ZkSettings.from_config(config), broker_info_from_config(config), channel,
                   unclean_leader_election=config["unclean.leader.election.enable"],
                   auto_leader_rebalance=config["auto.leader.rebalance.enable"],
                   imbalance_per_broker_pct=int(config["leader.imbalance.per.broker.percentage"]),
                   imbalance_check_interval_s=float(config["leader.imbalance.check.interval.seconds"]))

    def start(self) -> None:
        """Raises:
            ZooKeeperUnreachable: no ZooKeeper within zookeeper.connection.timeout.ms.
            BrokerIdInUse: another live broker has this broker.id.
        """
        self.client = open_session(self.settings)
        try:
            self.registry = BrokerRegistry(self.client, self.info, on_fatal=self._on_fatal)
            self.registry.register()
        except BaseException:
            self.client.stop()
            self.client.close()
            raise
        self.controller = Controller(self.client, self.info.broker_id, self.channel, **self.controller_kw)
        self.controller.start()

    def _on_fatal(self, e: Exception) -> None:
        self.fatal_error = e
        self.fatal.set()

    def stop(self, reachable: bool = True) -> None:
        """Resign, unregister and close the session. ``reachable`` False (ZooKeeper out of
        reach at the stop): nothing is asked of ZooKeeper — the session's expiry removes the
        registration and the controller's znode, and kazoo's own stop would wait out its whole
        connection retry policy (~30 s) — and the process's exit ends kazoo's threads."""
        if self.client is None:
            return
        if not reachable:
            if self.controller is not None:
                self.controller.stop(wait=False)
            return
        try:
            if self.controller is not None:
                self.controller.stop()
            if self.registry is not None:
                self.registry.unregister()
        finally:
            self.client.stop()
            self.client.close()
            self.client = None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m appliance.cluster.member",
                                description="Join a cluster as a broker without data: registration and "
                                            "controller only; controller requests are printed.")
    p.add_argument("--broker-id", type=int, required=True)
    p.add_argument("--zookeeper-connect", required=True, help="host:port[,host:port][/chroot]")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9092)
    p.add_argument("--session-timeout-ms", type=int, default=18000)
    p.add_argument("--connection-timeout-ms", type=int, default=None)
    p.add_argument("--unclean-leader-election", action="store_true")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = ZkSettings(args.zookeeper_connect, args.session_timeout_ms, args.connection_timeout_ms)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    member = ClusterMember(settings, BrokerInfo(args.broker_id, args.host, args.port), PrintChannel(),
                           unclean_leader_election=args.unclean_leader_election)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        member.start()
    except (BrokerIdInUse, ZooKeeperUnreachable) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_CANNOT_JOIN
    print(f"joined: broker {args.broker_id}", file=sys.stderr, flush=True)
    while not stop.wait(0.2):
        if member.fatal.is_set():
            print(f"error: {member.fatal_error}", file=sys.stderr)
            member.stop()
            return EXIT_CANNOT_JOIN
    member.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
