"""PNG charts of the results (matplotlib, Agg): throughput per workload and system, latency
percentiles, and the growth curve when it ran."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["draw"]

COLORS = {"appliance": "#1f77b4", "Redis Streams": "#d62728", "RabbitMQ Streams": "#ff7f0e",
          "NATS JetStream": "#2ca02c"}


def _throughput(res: dict, path: Path) -> bool:
    wls = [w for w in res["workloads"] if w["kind"] in ("produce", "consume")]
    if not wls:  # e.g. --workloads latency_10k
        return False
    rows_per = [[r for r in res["results"] if r["workload"] == w["name"] and r["median"].get("rps")]
                for w in wls]
    heights = [max(1, len(r)) for r in rows_per]
    fig, axes = plt.subplots(len(wls), 1, figsize=(9, 0.32 * sum(heights) + 1.1 * len(wls)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, w, rows in zip(axes[:, 0], wls, rows_per, strict=True):
        rows = sorted(rows, key=lambda r: r["median"]["rps"])
        labels = [f"{r['system']} · {r['client']}" for r in rows]
        vals = [r["median"]["rps"] for r in rows]
        ax.barh(labels, vals, color=[COLORS.get(r["system"], "grey") for r in rows])
        ax.set_xscale("log")
        for i, v in enumerate(vals):
            ax.text(v, i, f" {v / 1e3:,.0f}k", va="center", fontsize=8)
        ax.set_title(f"{w['title']}  (records/s, log scale)", fontsize=9, loc="left")
        ax.tick_params(labelsize=8)
        if vals:
            ax.set_xlim(min(vals) / 2, max(vals) * 4)
    fig.suptitle(f"Throughput, medians of {res['runs']} runs ({res['mode']}"
                 f"{'' if res['quiet'] else ', LOADED machine'})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return True


def _latency(res: dict, path: Path) -> bool:
    rows = [r for r in res["results"] if r["workload"] == "latency_10k" and r["median"].get("p99_ms")]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(8, 3.8))
    keys = [("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")]
    width = 0.8 / max(1, len(rows))
    for i, r in enumerate(rows):
        xs = [k + i * width for k in range(len(keys))]
        vals = [r["median"][k] for k, _ in keys]
        ax.bar(xs, vals, width, label=f"{r['system']} · {r['client']}", color=COLORS.get(r["system"], "grey"))
        for x, v in zip(xs, vals, strict=True):
            ax.text(x, v, f"{v:.2f}" if v < 10 else f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([k + width * (len(rows) - 1) / 2 for k in range(len(keys))], [n for _, n in keys])
    ax.set_yscale("log")
    ax.axhline(5, color="black", ls="--", lw=1)
    ax.text(len(keys) - 0.5, 5, "goal: p99 <= 5 ms", fontsize=8, va="bottom", ha="right")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(f"End-to-end latency at 10,000 records/s ({res['mode']}"
                 f"{'' if res['quiet'] else ', LOADED machine'})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return True


def _growth(res: dict, path: Path) -> bool:
    rows = [r for r in res["results"] if r["workload"] == "produce_growth" and r["runs"]
            and "points" in r["runs"][0]]
    if not rows:
        return False
    pts = rows[0]["runs"][0]["points"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot([p["stored_gib"] for p in pts], [p["rps"] for p in pts], "o-", color=COLORS["appliance"])
    ax.axhline(pts[0]["rps"] * 0.9, color="black", ls="--", lw=1, label="goal: within 10 % of empty")
    ax.set_xlabel("GiB stored")
    ax.set_ylabel("records/s (100 B)")
    ax.set_ylim(0, max(p["rps"] for p in pts) * 1.15)
    ax.legend(fontsize=8)
    ax.set_title("appliance produce rate as the log grows", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return True


def draw(res: dict, outdir: Path) -> list[Path]:
    """Write the PNGs into ``outdir``; returns their paths."""
    m = res["mode"]
    charts = ((_throughput, "throughput"), (_latency, "latency"), (_growth, "growth"))
    return [outdir / f"{m}-{name}.png" for draw_one, name in charts
            if draw_one(res, outdir / f"{m}-{name}.png")]
