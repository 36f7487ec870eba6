"""One run comparing the appliance with Redis Streams, RabbitMQ Streams and NATS JetStream, and
with the machine's own limits.

    bash perf/setup_peers.sh                      # once: Debian packages + '.[perf]' clients
    .venv/bin/python perf/run.py --quick          # ~3 minutes, small sizes
    .venv/bin/python perf/run.py --full --wait-quiet 40

Starts each system on 127.0.0.1 with temporary dirs and free ports, one after another, drives
the same workloads (perf/workloads/spec.py) with every client it has for it, stops it (also on
Ctrl-C, SIGTERM or an error), and prints medians over --runs runs with the ratios appliance ÷
peer and appliance ÷ machine limit, and the goals with MET / NOT MET. Results go to
perf/results/ (or --out): results-<mode>.json, RESULTS-<mode>.md, and PNG charts. See
perf/RUNNER.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from perf.peers.base import Peer, PeerUnavailable  # noqa: E402
from perf.workloads import charts, report  # noqa: E402
from perf.workloads.cpu_share import CpuWatch  # noqa: E402
from perf.workloads.host_memory import add_host_memory_args, host_memory  # noqa: E402
from perf.workloads.limits import measure_limits  # noqa: E402
from perf.workloads.machine import describe_machine, load1  # noqa: E402
from perf.workloads.spec import Workload, workloads  # noqa: E402

__all__ = ["main"]

QUIET_LOAD = 1.0


def make_peers(names: list[str]) -> list[Peer]:
    from perf.peers.appliance import Appliance
    from perf.peers.nats_jetstream import NatsJetStream
    from perf.peers.rabbitmq_streams import RabbitMQStreams
    from perf.peers.redis_streams import RedisStreams
    known = {"appliance": Appliance, "redis": RedisStreams, "rabbitmq": RabbitMQStreams,
             "nats": NatsJetStream}
    return [known[n]() for n in names]


def wait_quiet(minutes: float) -> bool:
    """Poll the 1-minute load average every 30 s until < QUIET_LOAD or ``minutes`` passed."""
    deadline = time.monotonic() + minutes * 60
    while True:
        la = load1()
        if la < QUIET_LOAD:
            print(f"machine quiet: load average {la:.2f}", flush=True)
            return True
        if time.monotonic() >= deadline:
            print(f"machine still loaded after {minutes:.0f} min (load average {la:.2f}); running anyway",
                  flush=True)
            return False
        print(f"waiting for a quiet machine: load average {la:.2f} >= {QUIET_LOAD}", flush=True)
        time.sleep(30)


def _on_sigterm(signum, frame):  # turn SIGTERM into the same unwinding as Ctrl-C
    raise KeyboardInterrupt(f"signal {signum}")


def run_peer(peer: Peer, wls: list[Workload], runs: int, tmp: Path, res: dict, loads: list[float],
             only_clients: set[str] | None = None) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"{peer.name.split()[0].lower()}-", dir=tmp))
    print(f"\n=== {peer.name}: starting", flush=True)
    t0 = time.monotonic()
    try:
        peer.start(work)
    except PeerUnavailable as e:
        print(f"=== {peer.name}: CANNOT RUN: {e}", flush=True)
        res["systems"][peer.name] = {"status": "unavailable", "reason": str(e), "describe": peer.name}
        peer.stop()
        shutil.rmtree(work, ignore_errors=True)
        return
    try:
        res["systems"][peer.name] = {"status": "ok", "reason": "", "describe": peer.describe(),
                                     "start_s": round(time.monotonic() - t0, 1)}
        print(f"=== {peer.name}: up in {time.monotonic() - t0:.1f} s ({peer.describe()})", flush=True)
        for wl in wls:
            clients = peer.clients(wl)
            if only_clients is not None:
                clients = [c for c in clients if c in only_clients]
                if not clients:
                    continue
            if not clients:
                res["results"].append({"system": peer.name, "client": "–", "workload": wl.name,
                                       "runs": [], "median": {}, "skipped": peer.skip_reason(wl)})
                continue
            for client in clients:
                row = {"system": peer.name, "client": client, "workload": wl.name, "runs": [], "median": {}}
                res["results"].append(row)
                cell_t0 = time.monotonic()
                if not warm_up(peer, wl, client, row):
                    continue
                watch = CpuWatch()
                for i in range(1 if wl.kind == "growth" else runs):
                    loads.append(load1())
                    try:
                        watch.start()
                        r = peer.run(wl, client, i)
                        r.update(watch.stop())
                    except KeyboardInterrupt:
                        raise
                    except Exception as e:  # noqa: BLE001 - a failed cell is reported, the run goes on
                        _cell_failed(row, wl, client, f"run {i + 1}", "", e)
                        break
                    row["runs"].append(r)
                    shown = (f"{r['rps']:>12,.0f} records/s" if "rps" in r else
                             f"p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} p99.9 {r['p999_ms']:.2f} ms"
                             if "p99_ms" in r else str(r))
                    print(f"  {wl.name:18s} {client:28s} run {i + 1}: {shown}  (CPUs busy: ours "
                          f"{r['ours_cores']:.2f}, other work {r['others_cores']:.2f}; ours waiting for "
                          f"one {r['ours_waiting']:.2f})", flush=True)
                row["median"] = report.median_of(row["runs"])
                row["collapsed"] = report.collapsed_runs(row["runs"])
                for c in row["collapsed"]:
                    print(f"  {wl.name:18s} {client:28s} run {c['run']}: COLLAPSED {report.shown(c)} = "
                          f"{100 * c['share']:.1f} % of the cell's median {c['median']:,.2f}; CPUs "
                          f"busy with other work during it {c['others_cores']:.2f} (cell's median "
                          f"{c['others_median']:.2f}), with ours {c['ours_cores']:.2f} ({c['ours_median']:.2f}), "
                          f"ours waiting for one {c['ours_waiting']:.2f} ({c['waiting_median']:.2f})",
                          flush=True)
                row["wall_s"] = round(time.monotonic() - cell_t0, 1)  # where a run's minutes go
            finish = getattr(peer, "finish_workload", None)
            if finish:
                try:
                    finish(wl)
                except Exception as e:  # noqa: BLE001 - clean-up of one workload must not end the run
                    print(f"  {wl.name}: clean-up failed: {e}", flush=True)
    finally:
        res["systems"][peer.name]["describe"] = peer.describe()
        print(f"=== {peer.name}: stopping", flush=True)
        peer.stop()
        shutil.rmtree(work, ignore_errors=True)
        res["systems"][peer.name]["wall_s"] = round(time.monotonic() - t0, 1)
        print(f"=== {peer.name}: {time.monotonic() - t0:.0f} s in all", flush=True)


def _cell_failed(row: dict, wl: Workload, client: str, where: str, prefix: str, e: Exception) -> None:
    """Record a cell's error (the run goes on with the next cell) and print it with its trace."""
    row["error"] = f"{prefix}{type(e).__name__}: {str(e)[:300]}"
    print(f"  {wl.name:18s} {client:28s} {where}: ERROR {row['error']}", flush=True)
    traceback.print_exc(limit=3)


def warm_up(peer: Peer, wl: Workload, client: str, row: dict) -> bool:
    """The peer's untimed warm-up of one cell (first use of a client in this process, topic
    creation, preloads), printed and recorded as its own first-run line. False if it failed
    (recorded as the cell's error, no runs)."""
    t0 = time.monotonic()
    try:
        what = peer.warm_up(wl, client)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - a failed cell is reported, the run goes on
        _cell_failed(row, wl, client, "first-run", "warm-up: ", e)
        return False
    if what is not None:
        row["first_run"] = {"s": round(time.monotonic() - t0, 2), "what": what}
        print(f"  {wl.name:18s} {client:28s} first-run: {time.monotonic() - t0:.2f} s, untimed ({what})",
              flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes, under 3 minutes (default)")
    mode.add_argument("--full", action="store_true", help="full sizes (10 M records, 20 GiB growth)")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell (median reported; >= 3)")
    ap.add_argument("--systems", default="appliance,redis,rabbitmq,nats",
                    help="comma list of: appliance, redis, rabbitmq, nats")
    ap.add_argument("--workloads", default="", help="comma list of workload names (default all)")
    ap.add_argument("--clients", default="",
                    help="comma list of client names, e.g. 'appliance.client tcp,confluent-kafka' "
                         "(default all); with --systems and --workloads it picks single cells")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="MIN",
                    help=f"first wait up to MIN minutes for a 1-minute load average < {QUIET_LOAD}")
    ap.add_argument("--tmp", default=None, help="parent of the temporary dirs (default: system temp)")
    ap.add_argument("--out", default=str(ROOT / "perf" / "results"), help="results directory")
    ap.add_argument("--merge", action="store_true",
                    help="re-measure only the chosen systems x workloads and replace those cells in the "
                         "existing results-<mode>.json (the Markdown notes which cells were re-run)")
    add_host_memory_args(ap)
    args = ap.parse_args(argv)
    quick = not args.full
    mode_name = "quick" if quick else "full"
    wls = workloads(quick)
    if args.workloads:
        wanted = set(args.workloads.split(","))
        unknown = wanted - {w.name for w in wls}
        if unknown:
            ap.error(f"unknown workloads {sorted(unknown)}; known: {[w.name for w in wls]}")
        wls = [w for w in wls if w.name in wanted]
    names = args.systems.split(",")
    bad = set(names) - {"appliance", "redis", "rabbitmq", "nats"}
    if bad:
        ap.error(f"unknown systems {sorted(bad)}")
    only_clients = set(args.clients.split(",")) if args.clients else None
    signal.signal(signal.SIGTERM, _on_sigterm)

    quiet = wait_quiet(args.wait_quiet) if args.wait_quiet else load1() < QUIET_LOAD
    tmp = Path(tempfile.mkdtemp(prefix="perf-run-", dir=args.tmp))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loads = [load1()]
    started = time.monotonic()
    res: dict = {
        "mode": mode_name, "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": shlex.join([".venv/bin/python", "perf/run.py", *(argv if argv is not None else sys.argv[1:])]),
        "runs": args.runs, "machine": describe_machine(tmp), "load_before": loads[0],
        "workloads": [w.as_dict() for w in wls], "systems": {}, "results": [], "limits": {}, "notes": [],
    }
    paused = contextlib.ExitStack()
    try:
        res["machine"]["host_page_reporting"] = paused.enter_context(host_memory(args))
        print(f"machine: {res['machine']['nproc']} CPUs, {res['machine']['memory_gib']} GiB, "
              f"load {loads[0]:.2f}; temp dir {tmp}", flush=True)
        print("measuring machine limits ...", flush=True)
        res["limits"] = measure_limits(tmp, (256 if quick else 1024) << 20)
        for k, v in res["limits"].items():
            print(f"  {k:14s} {v / 1e9:6.2f} GB/s", flush=True)
        for peer in make_peers(names):
            run_peer(peer, wls, args.runs, tmp, res, loads, only_clients)
    except KeyboardInterrupt:
        res["notes"].append("interrupted: partial results")
        print("\ninterrupted: every server started has been stopped; writing partial results", flush=True)
    finally:
        paused.close()  # the machine's setting back as it was
        shutil.rmtree(tmp, ignore_errors=True)
    if only_clients is not None:
        unmatched = only_clients - {r["client"] for r in res["results"]}
        if unmatched:
            print(f"no cell has the client(s) {sorted(unmatched)} (--clients)", flush=True)
    loads.append(load1())
    prior_path = out / f"results-{mode_name}.json"
    if args.merge and prior_path.exists():
        prior = json.loads(prior_path.read_text())
        redone = {(r["system"], r["workload"]) for r in res["results"]}
        kept = [r for r in prior["results"] if (r["system"], r["workload"]) not in redone]
        note = (f"cells re-run by `{res['command']}` at {res['started']} (load average "
                f"{loads[0]:.2f} .. {max(loads):.2f}): " + ", ".join(f"{s}/{w}" for s, w in sorted(redone)))
        loads += [prior["load_before"], prior["load_max"]]
        systems = {**prior["systems"], **res["systems"]}
        quiet = quiet and prior["quiet"]
        res = {**prior, "results": kept + res["results"], "systems": systems,
               "notes": [n for n in prior["notes"] if not n.startswith("machine loaded")] + [note]}
    res["load_max"] = max(loads)
    res["load_after"] = loads[-1]
    res["quiet"] = quiet and res["load_max"] < 2 * QUIET_LOAD
    res["elapsed_s"] = round(time.monotonic() - started, 1)
    res["goals"] = report.goals(res)
    if not res["quiet"]:
        res["notes"].append(f"machine loaded: 1-minute load average {res['load_before']:.2f} at start, "
                            f"max {res['load_max']:.2f} during the run")
    (out / f"results-{mode_name}.json").write_text(json.dumps(res, indent=1, default=str))
    (out / f"RESULTS-{mode_name}.md").write_text(report.markdown(res))
    pngs = charts.draw(res, out)
    print("\n" + report.console(res))
    print(f"\n{res['elapsed_s']:.0f} s; wrote {out}/results-{mode_name}.json, RESULTS-{mode_name}.md, "
          + ", ".join(p.name for p in pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
