"""Turn the runner's results into medians, ratios, goal verdicts, a console table and Markdown."""

from __future__ import annotations

import statistics

from perf.workloads.limits import LIMIT_NAMES
from perf.workloads.spec import GOALS

__all__ = ["median_of", "collapsed_runs", "shown", "best_appliance", "goals", "markdown", "console"]

LAT_KEYS = ("p50_ms", "p99_ms", "p999_ms")
# A throughput run below this share of its cell's median is a collapse, flagged and not averaged
# away: a user sees the worst run (issue 15). Noise on a loaded 2-core machine stays above it.
COLLAPSE_SHARE = 0.5


def median_of(runs: list[dict]) -> dict:
    ok = [r for r in runs if "rps" in r or "p99_ms" in r]
    if not ok:
        return {}
    if "p99_ms" in ok[0]:
        return {k: statistics.median(r[k] for r in ok) for k in (*LAT_KEYS, "max_ms")}
    rates = [r["rps"] for r in ok]
    return {"rps": statistics.median(rates), "min": min(rates), "max": max(rates), "n": len(rates)}


def collapsed_runs(runs: list[dict]) -> list[dict]:
    """The runs far worse than their cell's median (none with fewer than 3 runs: no median to
    speak of): a throughput run below COLLAPSE_SHARE of the median rate, a latency run whose
    p99 is above the median p99 divided by it (twice the median, the mirror image).
    Each: {run (1-based), what ("records/s" or "p99 ms"), value, median, share of the median,
    the CPU shares of that run and the cell's medians}."""
    key = "rps" if any("rps" in r for r in runs) else "p99_ms"
    rated = [(i + 1, r) for i, r in enumerate(runs) if key in r]
    if len(rated) < 3:
        return []
    med = statistics.median(r[key] for _, r in rated)
    if med <= 0:
        return []
    cpu = {k: statistics.median(r.get(k, 0.0) for _, r in rated)
           for k in ("ours_cores", "others_cores", "ours_waiting")}

    def bad(v: float) -> bool:
        return v < COLLAPSE_SHARE * med if key == "rps" else v > med / COLLAPSE_SHARE
    return [{"run": i, "what": "records/s" if key == "rps" else "p99 ms", "value": r[key],
             "median": med, "share": r[key] / med,
             "ours_cores": r.get("ours_cores", 0.0), "ours_median": cpu["ours_cores"],
             "others_cores": r.get("others_cores", 0.0), "others_median": cpu["others_cores"],
             "ours_waiting": r.get("ours_waiting", 0.0), "waiting_median": cpu["ours_waiting"]}
            for i, r in rated if bad(r[key])]


def shown(c: dict) -> str:
    """'1,234 records/s' or 'p99 12.30 ms'."""
    return f"{c['value']:,.0f} records/s" if c["what"] == "records/s" else f"p99 {c['value']:.2f} ms"


def _collapse_note(r: dict) -> str:
    return "; ".join(f"**COLLAPSED** run {c['run']}: {shown(c)} ({100 * c['share']:.1f} % of median)"
                     for c in r.get("collapsed", []))


def _rows(res: dict, workload: str) -> list[dict]:
    return [r for r in res["results"] if r["workload"] == workload]


def best_appliance(res: dict, workload: str) -> dict | None:
    rows = [r for r in _rows(res, workload) if r["system"] == "appliance" and r["median"].get("rps")]
    return max(rows, key=lambda r: r["median"]["rps"]) if rows else None


def _row(res: dict, workload: str, system: str, client: str) -> dict | None:
    for r in _rows(res, workload):
        if r["system"] == system and r["client"] == client and r["median"]:
            return r
    return None


def goals(res: dict) -> list[dict]:
    """[{goal, verdict MET/NOT MET/NOT RUN, detail}] for GOALS."""
    out = []
    for g in GOALS:
        verdict, detail = "NOT RUN", ""
        if g.key in ("produce_vs_redis", "consume_vs_rabbitmq"):
            wl = "produce_100B" if g.key == "produce_vs_redis" else "consume_100B"
            peer = ("Redis Streams", "redis-benchmark") if g.key == "produce_vs_redis" else ("RabbitMQ Streams", "rstream")
            a, p = best_appliance(res, wl), _row(res, wl, *peer)
            if a and p:
                ratio = a["median"]["rps"] / p["median"]["rps"]
                verdict = "MET" if ratio >= 3 else "NOT MET"
                detail = (f"appliance ({a['client']}) {a['median']['rps']:,.0f} /s vs {peer[0]} ({peer[1]}) "
                          f"{p['median']['rps']:,.0f} /s = {ratio:.2f}x (goal 3x)")
                conf = _row(res, wl, "appliance", "confluent-kafka")
                if conf and conf is not a:
                    detail += f"; with confluent-kafka {conf['median']['rps'] / p['median']['rps']:.2f}x"
            else:
                detail = f"missing: {'appliance' if not a else peer[0]} result"
        elif g.key in ("latency_p99", "latency_p99_per_record"):
            cell = "latency_10k" if g.key == "latency_p99" else "latency_10k_per_record"
            a = _row(res, cell, "appliance", "confluent-kafka")
            if a:
                p99 = a["median"]["p99_ms"]
                verdict = "MET" if p99 <= 5 else "NOT MET"
                detail = f"p99 {p99:.2f} ms (p50 {a['median']['p50_ms']:.2f}, p99.9 {a['median']['p999_ms']:.2f})"
        elif g.key == "growth":
            rows = _rows(res, "produce_growth")
            run = rows[0]["runs"][0] if rows and rows[0]["runs"] else None
            if run and "drop" in run:
                verdict = "MET" if run["drop"] <= 0.10 else "NOT MET"
                detail = (f"{run['rps_empty']:,.0f} /s at empty, {run['rps']:,.0f} /s at "
                          f"{run['points'][-1]['stored_gib']:.1f} GiB ({100 * run['drop']:+.1f} % drop)")
            elif run and "skipped" in run:
                detail = run["skipped"]
            elif rows and rows[0].get("error"):
                detail = rows[0]["error"]
            else:
                detail = "full mode only" if res["mode"] == "quick" else "no result"
        out.append({"goal": g.text, "verdict": verdict, "detail": detail})
    return out


def _limit_ratio(res: dict, wl: dict, rps: float) -> str:
    """Payload bytes/s over the limit that bounds this workload (write for produce, TCP for consume)."""
    key = "seq_write" if wl["kind"] == "produce" else "loopback_tcp"
    lim = res["limits"].get(key)
    if not lim:
        return ""
    return f"{100 * rps * wl['value_size'] / lim:.1f} % of {LIMIT_NAMES[key]}"


def _table_lines(res: dict) -> list[str]:
    lines = []
    for wl in res["workloads"]:
        rows = _rows(res, wl["name"])
        if wl["kind"] == "growth":
            continue
        lines.append(f"\n### {wl['name']}: {wl['title']}\n")
        if wl["kind"] == "latency":
            lines.append("| system | client | p50 ms | p99 ms | p99.9 ms | received / sent (median run) | appliance p99 ÷ this p99 |")
            lines.append("|---|---|---:|---:|---:|---:|---:|")
            a = _row(res, wl["name"], "appliance", "confluent-kafka")
            for r in rows:
                m = r["median"]
                if not m:
                    lines.append(f"| {r['system']} | {r['client']} | – | – | – | – | {r.get('error') or r.get('skipped')} |")
                    continue
                ratio = f"{a['median']['p99_ms'] / m['p99_ms']:.2f}" if a and r is not a else ""
                got = sorted(r["runs"], key=lambda x: x["p99_ms"])[len(r["runs"]) // 2]
                lines.append(f"| {r['system']} | {r['client']} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | "
                             f"{m['p999_ms']:.2f} | {got['received']:,} / {got['sent']:,} | {ratio} |")
            continue
        best = best_appliance(res, wl["name"])
        lines.append("| system | client | records/s (median) | MB/s payload | min – max | "
                     "appliance best ÷ this | vs machine limit |")
        lines.append("|---|---|---:|---:|---:|---:|---|")
        for r in rows:
            m = r["median"]
            if not m:
                lines.append(f"| {r['system']} | {r['client']} | – | – | – | – | "
                             f"{r.get('error') or r.get('skipped')} |")
                continue
            ratio = f"{best['median']['rps'] / m['rps']:.2f}x" if best and r["system"] != "appliance" else ""
            lim = _limit_ratio(res, wl, m["rps"]) if r["system"] == "appliance" else ""
            flag = _collapse_note(r)
            lines.append(f"| {r['system']} | {r['client']} | {m['rps']:,.0f} | "
                         f"{m['rps'] * wl['value_size'] / 1e6:,.1f} | {m['min']:,.0f} – {m['max']:,.0f}"
                         f"{'<br>' + flag if flag else ''} | {ratio} | {lim} |")
    return lines


def markdown(res: dict) -> str:
    mach = res["machine"]
    quiet = res["quiet"]
    lines = [f"# appliance vs peers: {res['mode']} run, {res['started']}", ""]
    if not quiet:
        lines += [f"**The machine was loaded during this run** (1-minute load average "
                  f"{res['load_before']:.2f} at the start, up to {res['load_max']:.2f} during it, on "
                  f"{mach['nproc']} cores, shared with other work): these are not clean figures; "
                  "ratios between systems measured minutes apart are noisy.", ""]
    else:
        lines += [f"Machine quiet at the start (load average {res['load_before']:.2f}); highest during "
                  f"the run {res['load_max']:.2f}.", ""]
    lines += [f"Command: `{res['command']}`. Medians of {res['runs']} runs per cell.", "",
              "## Machine", "",
              f"- {mach['nproc']} CPUs: {mach['cpu_model']}; {mach['memory_gib']} GiB memory; kernel "
              f"{mach['kernel']}; Python {mach['python']}",
              f"- temp dir {mach['tmp_dir']}: rotational={mach['rotational']}, {mach['disk_free_gib']} GiB free",
              *([f"- {mach['host_page_reporting']} (perf/workloads/host_memory.py)"]
                if "host_page_reporting" in mach else []),
              "", "```", mach["df"], "```", "", "## Systems", ""]
    for name, s in res["systems"].items():
        lines.append(f"- **{name}**: {s['describe']}" + ("" if s["status"] == "ok" else
                                                           f" — **could not run: {s['reason']}**"))
    lines += ["", "## Goals", "", "| goal | verdict | detail |", "|---|---|---|"]
    for g in res["goals"]:
        lines.append(f"| {g['goal']} | **{g['verdict']}** | {g['detail']} |")
    lines += ["", "## Machine limits (same run)", "", "| limit | GB/s | 100 B records/s equivalent |",
              "|---|---:|---:|"]
    for k, v in res["limits"].items():
        lines.append(f"| {LIMIT_NAMES[k]} | {v / 1e9:.2f} | {v / 100:,.0f} |")
    lines += ["", "## Results"]
    lines += _table_lines(res)
    lines += _collapse_lines(res) + _first_run_lines(res)
    growth = [r for r in res["results"] if r["workload"] == "produce_growth"]
    if growth and growth[0]["runs"] and "points" in growth[0]["runs"][0]:
        lines += ["", "### produce_growth: 100 B produce rate as the log grows", "",
                  "| stored GiB | records/s |", "|---:|---:|"]
        for p in growth[0]["runs"][0]["points"]:
            lines.append(f"| {p['stored_gib']:.1f} | {p['rps']:,.0f} |")
    if res.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    m = res["mode"]
    lines += ["", f"![throughput]({m}-throughput.png)", "", f"![latency]({m}-latency.png)"]
    if growth:
        lines += ["", f"![growth]({m}-growth.png)"]
    return "\n".join(lines) + "\n"


def _collapse_lines(res: dict) -> list[str]:
    rows = [r for r in res["results"] if r.get("runs")]
    if not rows:
        return []
    out = ["", f"### Collapsed runs (throughput below {100 * COLLAPSE_SHARE:.0f} % of their cell's "
           f"median, or p99 latency above {1 / COLLAPSE_SHARE:.0f}x it)", ""]
    hits = [(r, c) for r in rows for c in r.get("collapsed", [])]
    if not hits:
        return out + [f"None in {sum(len(r['runs']) for r in rows)} runs of {len(rows)} cells."]
    out += ["| system | client | workload | run | figure | % of median | CPUs busy, ours (cell median) "
            "| CPUs busy, other work (cell median) | our threads waiting for a CPU (cell median) |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {r['system']} | {r['client']} | {r['workload']} | {c['run']} | {shown(c)} | "
            f"{100 * c['share']:.1f} | {c.get('ours_cores', 0):.2f} ({c.get('ours_median', 0):.2f}) | "
            f"{c.get('others_cores', 0):.2f} ({c.get('others_median', 0):.2f}) | "
            f"{c.get('ours_waiting', 0):.2f} ({c.get('waiting_median', 0):.2f}) |" for r, c in hits]
    return out


def _first_run_lines(res: dict) -> list[str]:
    rows = [r for r in res["results"] if r.get("first_run")]
    if not rows:
        return []
    out = ["", "### First runs (untimed warm-up before each cell's timed runs)", "",
           "| system | client | workload | seconds | what |", "|---|---|---|---:|---|"]
    out += [f"| {r['system']} | {r['client']} | {r['workload']} | {r['first_run']['s']:.2f} | "
            f"{r['first_run']['what']} |" for r in rows]
    return out


def console(res: dict) -> str:
    out = [line for line in _table_lines(res) if not line.startswith("|---")]
    hits = [(r, c) for r in res["results"] for c in r.get("collapsed", [])]
    nruns = sum(len(r["runs"]) for r in res["results"] if r.get("runs"))
    out.append(f"\nCollapsed runs (throughput < {100 * COLLAPSE_SHARE:.0f} % of the cell's median, "
               f"p99 > {1 / COLLAPSE_SHARE:.0f}x it): "
               + (f"none in {nruns} runs" if not hits else f"{len(hits)} of {nruns}"))
    out += [f"  COLLAPSED: {r['system']} / {r['client']} / {r['workload']} run {c['run']}: {shown(c)} "
            f"({100 * c['share']:.1f} % of median)" for r, c in hits]
    out.append("\nGoals:")
    for g in res["goals"]:
        out.append(f"  [{g['verdict']}] {g['goal']}: {g['detail']}")
    return "\n".join(out)
