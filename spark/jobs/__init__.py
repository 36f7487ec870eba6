"""Example pipeline jobs over the appliance data source (see spark/README.md)."""

from __future__ import annotations

from typing import Any

__all__ = ["run_until_stopped"]


def run_until_stopped(spark: Any, query: Any) -> int:
    """Wait for a streaming query until it ends or Ctrl-C stops it, then stop Spark; exit 0."""
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    return 0
