"""perf/workloads/report.py's collapse flags: a throughput run below half its cell's median, a
latency run with more than twice its cell's median p99."""

from __future__ import annotations

from perf.workloads import report


def _cpu(r: dict) -> dict:
    return {**r, "ours_cores": 1.0, "others_cores": 0.2, "ours_waiting": 0.1}


def _lat(p99: float) -> dict:
    return _cpu({"p50_ms": 1.0, "p99_ms": p99, "p999_ms": 2 * p99, "max_ms": 3 * p99})


def test_a_throughput_run_below_half_the_median_is_flagged():
    runs = [_cpu({"rps": v}) for v in (100_000, 98_000, 40_000, 101_000, 99_000)]
    hits = report.collapsed_runs(runs)
    assert [(c["run"], c["what"], c["value"]) for c in hits] == [(3, "records/s", 40_000)]
    assert report.shown(hits[0]) == "40,000 records/s"
    assert report.collapsed_runs(runs[:2]) == []  # no median to speak of


def test_a_latency_run_above_twice_the_median_p99_is_flagged():
    runs = [_lat(v) for v in (5.0, 5.5, 11.5, 4.8, 10.9)]
    hits = report.collapsed_runs(runs)
    assert [(c["run"], c["what"]) for c in hits] == [(3, "p99 ms")]  # 11.5 > 2 x 5.5; 10.9 is not
    assert report.shown(hits[0]) == "p99 11.50 ms"


def test_the_markdown_section_lists_latency_collapses_and_counts_every_run():
    lat = {"system": "appliance", "client": "raw", "workload": "latency_10k",
           "runs": [_lat(v) for v in (5, 5, 30)]}
    thr = {"system": "appliance", "client": "raw", "workload": "produce_100B",
           "runs": [_cpu({"rps": v}) for v in (10, 11, 12)]}
    for r in (lat, thr):
        r["collapsed"] = report.collapsed_runs(r["runs"])
    text = "\n".join(report._collapse_lines({"results": [lat, thr]}))
    assert "| appliance | raw | latency_10k | 3 | p99 30.00 ms |" in text
    assert "produce_100B" not in text
    lat["runs"] = [_lat(5)] * 3
    lat["collapsed"] = report.collapsed_runs(lat["runs"])
    assert "None in 6 runs of 2 cells." in "\n".join(report._collapse_lines({"results": [lat, thr]}))
