"""The SIGKILL campaign of tests/faults/kill_campaign.py over a cluster: three brokers and a real
ZooKeeper, a topic with replication factor 3 and min.insync.replicas=2, the same idempotent
acks=all stream and committing consumer group, and the same checks after every round (every
acknowledged record once, at its offset, in order; committed offsets never going back).

A round kills one of: a broker's whole process group, two brokers at once (the producer waits
below min.insync.replicas), all three one after another (each restarted before the next is
killed, so leadership moves onto replicas that are still catching up), or one worker of a broker
(disk, network or cluster worker; its supervisor starts a new one). The round ends once every
broker is registered and in every ISR again. At the end the replicas of every partition must be
byte-identical.

Shared by tests/cluster/test_kill_campaign.py (one round of each kind), its
test_kill_campaign_fewer_replicas.py and scripts/kill_campaign.py --cluster (as many as asked)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.procs import wait_gone
from tests.broker_process import BrokerProcess
from tests.cluster.harness import (
    cluster_broker,
    cluster_metadata,
    kill_brokers,
    log_bytes,
    start_brokers,
    wait_for,
)
from tests.faults.kill_campaign import TOPIC, Campaign
from tests.faults.procs import wait_workers

__all__ = ["ClusterCampaign", "KINDS", "run_bounded"]

BROKERS = 3
KINDS = ("broker", "two brokers", "one by one", "disk worker", "network worker", "cluster worker")
HEAL_S = 180  # every broker registered and in every ISR again, on a loaded 2-CPU machine


class ClusterCampaign(Campaign):
    """``kinds``: the victims' kinds round by round, in turn; random (from KINDS) when None."""

    def __init__(self, workdir: Path, seed: int, zk_connect: str, partitions: int = 4,
                 kinds: Iterable[str] | None = None, log: Callable[[str], None] = print,
                 replication_factor: int = BROKERS) -> None:
        self._init_checks(workdir, seed, partitions, log)
        self.connect = zk_connect
        # below BROKERS each broker hosts only some partitions: the clients' requests reach
        # brokers with no replica of a partition too (min.insync.replicas 2 where RF allows)
        self.rf = replication_factor
        self.kinds = list(kinds) if kinds is not None else None
        self.brokers = {i: self._broker(i) for i in range(BROKERS)}

    def _broker(self, broker_id: int, port: int | None = None) -> BrokerProcess:
        return cluster_broker(self.workdir / f"b{broker_id}", self.connect, broker_id, port, overrides={
            "replica.lag.time.max.ms": "10000", "offsets.topic.num.partitions": "3"})

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    # -- set-up and tear-down -------------------------------------------------------------
    def start(self) -> None:
        start_brokers(self.brokers.values())
        wait_for(lambda: len(cluster_metadata(self.bootstrap).brokers) == BROKERS, 60,
                 "every broker registered", step=0.2)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # alive until the answer
        admin.create_topics([NewTopic(TOPIC, self.partitions, self.rf,
                                      config={"min.insync.replicas": str(min(2, self.rf))})])[TOPIC].result(60)
        self._wait_healed()
        self._start_clients()

    def close(self) -> None:
        self._stop_clients()
        kill_brokers(self.brokers.values())
        for b in self.brokers.values():
            b.release_shm()  # a SIGKILLed broker's shared memory (the script has no session end)

    # -- one round ------------------------------------------------------------------------
    def _healed(self) -> bool:
        md = cluster_metadata(self.bootstrap)
        t = md.topics.get(TOPIC)
        return (len(md.brokers) == BROKERS and t is not None and t.error is None
                and all(p.leader >= 0 and len(p.isrs) == self.rf for p in t.partitions.values()))

    def _wait_healed(self) -> None:
        for b in self.brokers.values():
            wait_workers(b, 1, 1, timeout=HEAL_S)
        wait_for(self._healed, HEAL_S, "every broker in every ISR", step=0.2)

    def _restart(self, victims: list[int]) -> None:
        """SIGKILL the brokers ``victims`` (whole process groups), then start them again."""
        for i in victims:
            self.brokers[i].kill()
            wait_gone(self.brokers[i])
        time.sleep(self.rng.uniform(0, 3))
        for i in victims:
            self.brokers[i] = self._broker(i, port=self.brokers[i].port)
        start_brokers([self.brokers[i] for i in victims], timeout=120)

    def kill_once(self) -> str:
        kind = self.kinds[self.report.rounds % len(self.kinds)] if self.kinds else self.rng.choice(KINDS)
        ids = sorted(self.brokers)
        t0 = time.monotonic()
        if kind == "broker":
            self._restart(self.rng.sample(ids, 1))
        elif kind == "two brokers":
            self._restart(self.rng.sample(ids, 2))
        elif kind == "one by one":
            for i in self.rng.sample(ids, BROKERS):
                self._restart([i])
        else:
            broker = self.brokers[self.rng.choice(ids)]
            before = broker.worker_pids(kind)
            pid = self.rng.choice(before)
            os.kill(pid, signal.SIGKILL)
            # its successor runs (Metadata alone could still show the cluster as it was)
            wait_for(lambda: pid not in (now := broker.worker_pids(kind)) and len(now) == len(before),
                     30, f"a new {kind}")
        self._wait_healed()
        self.report.restart_seconds.append(time.monotonic() - t0)
        self.report.kills[kind] += 1
        return kind

    # -- the end --------------------------------------------------------------------------
    def differing_replicas(self, timeout: float = 60) -> list[int]:
        """With the stream paused (after a round): the partitions whose replicas are not
        byte-identical (every segment file) within ``timeout``."""
        def differing() -> list[int]:
            return [p for p in range(self.partitions)
                    if len({log_bytes(b, TOPIC, p) for b in self.brokers.values()
                            if (Path(b.log_dirs[0]) / f"{TOPIC}-{p}").is_dir()}) != 1]
        deadline = time.monotonic() + timeout
        while (left := differing()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left


def run_bounded(camp: ClusterCampaign, rounds: int, label: str, capsys) -> None:
    """The tests' bounded campaign: start, ``rounds`` rounds, then the checks of the module
    docstring, asserted (``capsys``: pytest's, to print the report line past the capture)."""
    try:
        camp.start()
        victims = [camp.round() for _ in range(rounds)]
        camp.check_group_caught_up()
        differing = camp.differing_replicas()
    finally:
        camp.close()
    rep = camp.report
    with capsys.disabled():
        print(f"\n{label}: {rep.line()}; victims {victims}; back in every ISR after "
              f"max {max(rep.restart_seconds):.1f} s")
    assert not rep.problems, rep.problems[:10]
    assert rep.rounds == rounds
    assert rep.acked > 1000 and rep.consumed > 0 and rep.commits > 0
    assert rep.crc_errors == 0
    assert not differing, f"partitions whose replicas differ: {differing}"
