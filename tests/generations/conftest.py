"""A broker shared by the generation tests of one module (each test uses its own topics)."""

from __future__ import annotations

import warnings

import pytest

from tests.broker_process import BrokerProcess

with warnings.catch_warnings():  # kafka-python imports its protocol JSON through a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401


# no 3 s wait for more members before a group's first rebalance (Kafka's own test brokers set
# 0 too): every group join of these tests would pay it
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"), overrides=FAST_GROUPS) as b:
        yield b
