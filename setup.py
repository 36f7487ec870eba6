"""The one C extension (native/record_run.c: Producer.send()'s per-record path); everything
else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("native.record_run", ["native/record_run.c"], extra_compile_args=["-O2"])])
