"""Fixtures for the real-client broker tests: one broker per module where tests can share it."""

from __future__ import annotations

import warnings

import pytest

from tests.broker_process import BrokerProcess

# kafka-python loads its protocol JSON through a deprecated importlib API; import it quietly once
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401
    import kafka.admin  # noqa: F401


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    """A broker shared by every test of one module (each test uses its own topic names)."""
    with BrokerProcess(tmp_path_factory.mktemp("broker")) as b:
        yield b
