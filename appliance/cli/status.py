"""`appliance status [--config FILE] [--override k=v ...] [--watch | --json]`: one screen of health.

Finds the broker from the same options as `serve` (the shared memory name derives from the
configuration), samples it twice ``--interval`` apart (CPU and message rates are over that
interval) and prints workers, disks, the busiest partitions and the groups' lag. ``--watch``
redraws it in place (rich's Live) until Ctrl-C; ``--json`` prints one JSON document for scripts.
Exit status 1 with a one-line message when no broker runs or its shared memory has another layout.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from appliance.cli.main import CliError
from appliance.cli.serve import parse_overrides

__all__ = ["add_arguments", "run", "render"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="the broker's server.properties")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="as given to serve (repeatable)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--watch", action="store_true", help="refresh in place until Ctrl-C")
    out.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="sampling interval for rates and CPU (default 1)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="partitions shown (default 10)")
    p.add_argument("--no-groups", action="store_true", help="skip the groups (no network request)")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _v(x: Any) -> str:
    return "-" if x is None else str(x)


def render(s: dict[str, Any]) -> Any:
    """A rich renderable of one snapshot."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    b = s["broker"]
    sup = b["supervisor"]
    head = Text(f"broker {b['id']}  port {b['port']}  shm {b['shm']}  supervisor pid {sup['pid']}"
                f" ({'alive' if sup['alive'] else 'GONE'})  partitions {b['partitions']}  "
                f"{s['messages_per_s']:.1f} msg/s", style="bold")
    listeners = Text("listeners " + "  ".join(f"{ep['name']} {ep['address']} ({ep['security_protocol']})"
                                               for ep in b.get("listeners", [])))
    w = Table(title="workers", title_justify="left", expand=False)
    for col in ("kind", "#", "pid", "state", "heartbeat", "cpu %", "rss", "fds"):
        w.add_column(col, justify="right" if col not in ("kind", "state") else "left")
    for x in s["workers"]:
        age = x["heartbeat_age_s"]
        w.add_row(x["kind"], str(x["index"]), str(x["pid"]), x["state"],
                  "-" if age is None else f"{age:.1f} s", _v(x["cpu_percent"]), _size(x["rss_bytes"]),
                  _v(x["fds"]))
    d = Table(title="disks", title_justify="left")
    for col in ("#", "path", "state", "rot", "write-back", "free", "parts", "offline"):
        d.add_column(col, overflow="fold")
    for x in s["disks"]:
        rot = {True: "yes", False: "no", None: "-"}[x["rotational"]]
        d.add_row(str(x["index"]), x["path"], x["state"], rot, _v(x["writeback_mode"]),
                  _size(x["free_bytes"]), str(x["partitions"]), str(x["offline_partitions"]))
    p = Table(title="top partitions", title_justify="left")
    for col in ("topic", "partition", "disk", "state", "msg/s", "log end", "high watermark", "log start"):
        p.add_column(col, justify="left" if col in ("topic", "state") else "right")
    for x in s["top_partitions"]:
        p.add_row(x["topic"], str(x["partition"]), str(x["disk"]), x["state"], f"{x['messages_per_s']:.1f}",
                  str(x["log_end_offset"]), str(x["high_watermark"]), str(x["log_start_offset"]))
    parts = [head, listeners, w, d, p]
    if "groups" in s:
        if s["groups"] is None:
            parts.append(Text(f"groups: not available ({s['groups_error']})", style="yellow"))
        else:
            g = Table(title="groups", title_justify="left")
            for col in ("group", "state", "members", "partitions", "lag"):
                g.add_column(col)
            for x in s["groups"]:
                g.add_row(x["group"], x["state"], str(x["members"]), str(len(x["partitions"])), str(x["lag"]))
            parts.append(g)
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    from appliance.cli.status_snapshot import BrokerNotFound, StatusReader
    from appliance.config import BrokerConfig, ConfigError

    if args.interval <= 0:
        raise CliError(f"--interval {args.interval}: must be positive", 2)
    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override), warn=False)
    except ConfigError as e:
        raise CliError(str(e), 2) from e
    except OSError as e:
        raise CliError(f"--config {args.config}: {e.strerror}", 2) from e
    try:
        reader = StatusReader(config)
    except BrokerNotFound as e:
        raise CliError(str(e), 1) from e
    try:
        reader.prime()
        time.sleep(args.interval)
        if args.json:
            print(json.dumps(reader.sample(groups=not args.no_groups, top=args.top), indent=2))
            return 0
        from rich.console import Console

        console = Console()
        if not args.watch:
            console.print(render(reader.sample(groups=not args.no_groups, top=args.top)))
            return 0
        from rich.live import Live

        with Live(render(reader.sample(groups=not args.no_groups, top=args.top)), console=console,
                  auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(reader.sample(groups=not args.no_groups, top=args.top)), refresh=True)
    finally:
        reader.close()
