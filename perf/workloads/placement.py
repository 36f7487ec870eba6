"""Where a benchmark's broker processes and its client run: every CPU (shared), apart (split), or
all on the same CPUs (together).

``split`` gives the brokers ``--broker-cpus`` through ``appliance.cpu.affinity`` and the
benchmark's own process (and the client threads and processes it starts afterwards) the other
CPUs, as Kafka's published figures ran their producers on machines of their own. On the 2-vCPU
test VM a wake-up across CPUs costs 17 us of CPU against 2.2 on one (perf/bench_wakeup.py), and
the client's threads no longer preempt the brokers. ``together`` puts the client on the brokers'
CPUs too: a request-at-a-time exchange then makes no wake-up across CPUs at all, which isolates
what those wake-ups cost (the client's threads compete with the brokers for the same CPUs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from appliance.process.cpu_affinity import parse_cpu_list

__all__ = ["placement", "add_placement_args", "placements", "describe"]


def _upper_half() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return ",".join(map(str, cpus[len(cpus) // 2:]))


def add_placement_args(ap: argparse.ArgumentParser, default: str = "both") -> None:
    ap.add_argument("--placement", choices=["shared", "split", "together", "both", "all"],
                    default=default,
                    help="shared: brokers and client on every CPU; split: brokers on "
                         "--broker-cpus, the client on the rest; together: brokers and client "
                         "on --broker-cpus; both: shared then split; all: the three in turn")
    ap.add_argument("--broker-cpus", default=_upper_half(),
                    help="the brokers' CPU list in the split placement (default: the upper half)")


def placements(args: argparse.Namespace) -> list[str]:
    """The placements to run, after checking --broker-cpus (exits naming it when bad)."""
    try:
        cpus = parse_cpu_list(args.broker_cpus)
    except ValueError as e:
        raise SystemExit(f"--broker-cpus {args.broker_cpus}: {e}") from None
    mine = os.sched_getaffinity(0)
    if args.placement in ("split", "both", "all") and (not cpus or not cpus < mine):
        raise SystemExit(f"--broker-cpus {args.broker_cpus}: must leave a CPU of "
                         f"{sorted(mine)} to the client")
    if args.placement == "together" and (not cpus or not cpus <= mine):
        raise SystemExit(f"--broker-cpus {args.broker_cpus}: must be among {sorted(mine)}")
    return {"both": ["shared", "split"], "all": ["shared", "split", "together"]}.get(
        args.placement, [args.placement])


@contextlib.contextmanager
def placement(name: str, broker_cpus: str) -> Iterator[dict[str, str]]:
    """Inside: this process on the client's CPUs (split), on the brokers' (together) or
    unchanged (shared). Yields the brokers' extra settings."""
    if name == "shared":
        yield {}
        return
    mine = os.sched_getaffinity(0)
    brokers = parse_cpu_list(broker_cpus)
    # threads and processes made later inherit it
    os.sched_setaffinity(0, brokers if name == "together" else mine - brokers)
    try:
        yield {"appliance.cpu.affinity": broker_cpus}
    finally:
        os.sched_setaffinity(0, mine)


def describe(name: str, broker_cpus: str) -> str:
    """A line saying where things run (call inside :func:`placement`)."""
    if name == "shared":
        return "-- placement shared: brokers and client on every CPU"
    if name == "together":
        return f"-- placement together: brokers and client on CPU(s) {broker_cpus}"
    client = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    return f"-- placement split: brokers on CPU(s) {broker_cpus}, client on {client}"
