"""Nemeses on a cluster across test hosts (tests/network/cluster.py): three brokers, a
ZooKeeper ensemble of three, a topic of 6 partitions with replication factor 3 and
min.insync.replicas 2, and an idempotent acks=all producer in a client host streaming
throughout. Each test applies one fault for a while (longer than the brokers' 6 s ZooKeeper
session), heals it and checks: every broker back in every ISR within 30 s, every acknowledged
record once at its offset, no offset acknowledged twice, the replicas byte-identical.

One cluster serves the module; each test leaves it whole for the next."""

import signal

import pytest

from tests.cluster.harness import wait_for
from tests.network.cluster import RELAY_PORT, SUITE_NEMESES, NetCluster

HOLD_S = 9.0


@pytest.fixture(scope="module")
def cluster(netns_ok, tmp_path_factory):
    # a SIGTERM (`timeout`, a CI limit) ends pytest as Ctrl-C does, through the fixtures'
    # teardown: killed outright it would leave the hosts' namespaces and processes running
    # (a later run reclaims them, hosts.reclaim_stale, but only once one is made)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    c = NetCluster(tmp_path_factory.mktemp("network"), seed=45, log=lambda line: None)
    try:
        c.start()
        yield c
    finally:
        c.close()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def test_inter_broker_connections_go_through_the_relays(cluster):
    """Replica fetchers and the controller connect to the advertised REPLICATION endpoint, the
    delaying relay in front of each broker (so the delay nemesis reaches them)."""
    def through_relays() -> bool:
        out = "".join(h.run("ss", "-tnH", "state", "established", f"( dport = :{RELAY_PORT} )").stdout
                      for h in (cluster.net[f"b{i}"] for i in cluster.brokers))
        return len(out.splitlines()) >= len(cluster.brokers)
    wait_for(through_relays, 30, "inter-broker connections through the relays")


@pytest.mark.parametrize("nemesis", SUITE_NEMESES)
def test_nemesis(cluster, nemesis):
    before = len(cluster.report.problems)
    what = cluster.round(nemesis, hold=HOLD_S)
    new = cluster.report.problems[before:]
    assert not new, f"{what}:\n" + "\n".join(new) + f"\n{cluster.report.summary()}"
    assert cluster.report.recover_s[-1] <= 30
