"""`appliance preferred-replica-election`: 0.8's kafka-preferred-replica-election.sh.

    appliance preferred-replica-election --zookeeper ZK [--path-to-json-file F]
    appliance preferred-replica-election --bootstrap-server H:P [--path-to-json-file F]

With ``--zookeeper`` the tool does what 0.8's did: it writes the partitions (every partition of
every topic when no file is given) to ``/admin/preferred_replica_election``, which the
controller watches, elects each partition's first replica where it is alive and in the ISR, and
deletes. A node still there means an election is in progress: refused, as 0.8 refused it. With
``--bootstrap-server`` the same election goes through ElectLeaders, the modern path
(``appliance leader-election --election-type preferred``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.cli.leader_election import parse_partitions_file
from appliance.cli.main import CliError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="the cluster's zookeeper.connect")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT", help="a broker of the cluster (ElectLeaders)")
    p.add_argument("--path-to-json-file", metavar="FILE",
                   help='{"partitions":[{"topic":"t","partition":0}]}; default: every partition')
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="ZooKeeper and broker connection timeout (default 30)")


def _listed(tps: list[tuple[str, int]]) -> str:
    return "Set(" + ", ".join(f"[{t},{p}]" for t, p in sorted(tps)) + ")"


def run(args: argparse.Namespace) -> int:
    partitions = None
    if args.path_to_json_file:
        try:
            partitions = parse_partitions_file(Path(args.path_to_json_file).read_text())
        except OSError as e:
            raise CliError(f"--path-to-json-file {args.path_to_json_file}: {e.strerror or e}", 2) from e
    if args.bootstrap_server:
        from appliance.cli import leader_election
        ns = argparse.Namespace(**vars(args), election_type="preferred", topic=None, partition=None,
                                all_topic_partitions=partitions is None)
        return leader_election.run(ns)
    from kazoo.exceptions import NodeExistsError

    from appliance.cli.zookeeper_tool import zookeeper_store
    from appliance.cluster.zk_paths import TopicPartition
    with zookeeper_store(args.zookeeper, args.timeout, getattr(args, "verbose", False)) as store:
        if partitions is None:
            partitions = [(t, p) for t in store.topics()
                          if (a := store.assignment(t)) is not None for p in a.partitions]
        if not partitions:
            raise CliError("no partitions to elect: the cluster has no topics")
        try:
            store.request_preferred_election({TopicPartition(t, p) for t, p in partitions})
        except NodeExistsError:
            pending = sorted((tp.topic, tp.partition) for tp in store.preferred_election())
            raise CliError("Preferred replica leader election currently in progress for "
                           f"{_listed(pending)}. Aborting operation") from None
    print(f"Successfully started preferred replica election for partitions {_listed(partitions)}")
    return 0
