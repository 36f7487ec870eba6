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


def _submitted_conf() -> dict[str, str]:
    """The settings spark-submit passed (--conf), when this driver was started by it."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf, SparkContext

    # SparkConf() sees the JVM's settings only once the gateway (spark-submit's) is connected.
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def cluster_conf(master: str, python: str | None = None) -> dict[str, str]:
    """Settings that make executors on a cluster run this interpreter with the project importable.

    Executors do not inherit the driver's environment: ``spark.pyspark.python`` names the
    interpreter their Python workers run and ``spark.executorEnv.PYTHONPATH`` puts the
    repository root on its path. Both must exist on every worker host (same path).
    """
    conf = {"spark.pyspark.python": python or sys.executable,
            "spark.executorEnv.PYTHONPATH": REPO_ROOT}
    if master.startswith("spark://"):
        conf.update({"spark.executor.memory": "512m", "spark.executor.cores": "1"})
    return conf


def session(app_name: str = "appliance", master: str | None = "local[2]", *,
            check: bool = True, **conf: str):
    """Get or create a SparkSession with the ``appliance`` format registered.

    ``master`` None leaves the master to ``spark-submit --master`` (jobs run that way). On a
    cluster, ``check`` runs :func:`spark.worker_check.check_workers` (raises
    WorkerEnvironmentError naming the workers' interpreter and the fix).

    ``conf`` entries are Spark settings with dots written as underscores would be ambiguous, so
    pass them as a dict: ``session(**{"spark.sql.shuffle.partitions": "4"})``.
    """
    submitted = _submitted_conf()  # what spark-submit was told wins over our defaults
    python = submitted.get("spark.pyspark.python", sys.executable)
    os.environ["PYSPARK_PYTHON"] = python
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if REPO_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *paths])
    from pyspark.sql import SparkSession

    from spark.datasource import ApplianceDataSource

    builder = SparkSession.builder.appName(app_name)
    if master is not None:  # None: spark-submit's --master (or Spark's default, local[*])
        builder = builder.master(master)
    builder = (builder.config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC"))
    for k, v in cluster_conf(master or submitted.get("spark.master", ""), python).items():
        if k not in submitted:
            builder = builder.config(k, v)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.dataSource.register(ApplianceDataSource)
    if check and not spark.sparkContext.master.startswith("local"):
        from spark.worker_check import check_workers

        check_workers(spark)  # executors elsewhere: fail now, clearly, not in the first read
    return spark
