"""Workload definitions, machine limits, latency harness, machine description, report, charts
for the comparison runner (perf/run.py)."""

__all__: list[str] = []
