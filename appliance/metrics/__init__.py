"""Prometheus metrics: per-worker counters in shared memory (:mod:`.recorder`), the collector
that sums them and adds gauges read at scrape time (:mod:`.collector`), and the HTTP endpoint a
network worker serves them from (:mod:`.http_endpoint`)."""
