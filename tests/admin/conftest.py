"""A broker shared by the admin tests of one module (each test uses its own topics)."""

from __future__ import annotations

import warnings

import pytest

from tests.broker_process import BrokerProcess

with warnings.catch_warnings():  # kafka-python imports its protocol JSON through a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker")) as b:
        yield b
