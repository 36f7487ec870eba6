"""A SparkSession set up for this project: workers run this interpreter and import ``spark``.

Spark's Python workers must unpickle :class:`spark.datasource.ApplianceDataSource`, so they need
the repository root on their path and the same interpreter (with numba, pyarrow, ...) as the
driver. :func:`session` sets ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` to ``sys.executable``
and puts the repository root on ``PYTHONPATH`` before the JVM starts, then registers the source.

Not thread-safe (it edits ``os.environ``); call it once at start-up.
"""

from __future__ import annotations

import os
import sys

__all__ = ["session", "cluster_conf", "REPO_ROOT"]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cluster_conf(master: str) -> dict[str, str]:
    """Settings that make executors on a cluster run this interpreter with the project importable.

    Executors do not inherit the driver's environment: ``spark.pyspark.python`` names the
    interpreter their Python workers run and ``spark.executorEnv.PYTHONPATH`` puts the
    repository root on its path. Both must exist on every worker host (same path).
    """
    conf = {"spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": REPO_ROOT}
    if master.startswith("spark://"):
        conf.update({"spark.executor.memory": "512m", "spark.executor.cores": "1"})
    return conf


def session(app_name: str = "appliance", master: str = "local[2]", **conf: str):
    """Get or create a SparkSession with the ``appliance`` format registered.

    ``conf`` entries are Spark settings with dots written as underscores would be ambiguous, so
    pass them as a dict: ``session(**{"spark.sql.shuffle.partitions": "4"})``.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if REPO_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *paths])
    from pyspark.sql import SparkSession

    from spark.datasource import ApplianceDataSource

    builder = (SparkSession.builder.appName(app_name).master(master)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC"))
    for k, v in cluster_conf(master).items():
        builder = builder.config(k, v)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.dataSource.register(ApplianceDataSource)
    return spark
