"""Check, before the first read, that Spark's executors can run the data source.

Executors start their Python workers with ``spark.pyspark.python`` (else ``PYSPARK_PYTHON``,
else ``python3``) and the path of ``spark.executorEnv.PYTHONPATH``. With another interpreter, or
without the project on that path, a read would fail deep inside Spark's worker with a bare
``ModuleNotFoundError``. :func:`check_workers` runs a tiny job (one task per executor core) whose
function is shipped by value and imports what the source needs; any failure becomes one error
naming the interpreter the workers run and how to fix it.

Not thread-safe (it runs a Spark job); call it once after creating the session.
"""

from __future__ import annotations

import os
import sys

__all__ = ["check_workers", "WorkerEnvironmentError", "NEEDED_MODULES"]

#: what a task of the data source imports
NEEDED_MODULES = ("numpy", "pyarrow", "numba", "appliance", "native", "spark.datasource")


class WorkerEnvironmentError(RuntimeError):
    """Spark's executors cannot run the appliance data source (wrong interpreter or path)."""


def _fix(driver_python: str, repo: str) -> str:
    return (f"fix: run the workers with the driver's interpreter and the project on their path "
            f"(--conf spark.pyspark.python={driver_python} --conf "
            f"spark.executorEnv.PYTHONPATH={repo}; spark.session() sets both), with the same "
            "paths on every worker host, or install the project into the workers' interpreter")


def check_workers(spark, repo_root: str | None = None) -> None:
    """Raise WorkerEnvironmentError naming the workers' interpreter when it cannot import
    :data:`NEEDED_MODULES` or is not the driver's Python version."""
    from spark.session import REPO_ROOT

    repo = repo_root or REPO_ROOT
    sc = spark.sparkContext
    configured = (sc.getConf().get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
                  or "python3")
    want = sys.version_info[:2]

    def probe(_):  # shipped by value: must not need the project to unpickle
        import importlib
        import sys as s

        missing = []
        for name in ("numpy", "pyarrow", "numba", "appliance", "native", "spark.datasource"):
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - any import failure is reported
                missing.append(f"{name} ({type(e).__name__}: {e})")
        yield s.executable, ".".join(map(str, s.version_info[:3])), missing

    n = max(1, sc.defaultParallelism)
    try:
        results = sc.parallelize(range(n), n).mapPartitions(probe).collect()
    except Exception as e:  # noqa: BLE001 - Py4J wraps the worker's failure
        text = str(e)
        first = next((ln for ln in text.splitlines() if "Error" in ln or "error" in ln), text[:300])
        raise WorkerEnvironmentError(
            f"Spark workers could not start the Python interpreter {configured!r} for the "
            f"appliance data source: {first.strip()[:500]}; {_fix(sys.executable, repo)}"
        ) from None
    for exe, version, missing in results:
        if missing or tuple(map(int, version.split(".")[:2])) != want:
            what = (f"cannot import {', '.join(missing)}" if missing else
                    f"is Python {version}, the driver runs {sys.version.split()[0]}")
            raise WorkerEnvironmentError(
                f"Spark workers run the Python interpreter {exe} (Python {version}, from "
                f"spark.pyspark.python / PYSPARK_PYTHON = {configured!r}), which {what}; "
                f"{_fix(sys.executable, repo)}")
