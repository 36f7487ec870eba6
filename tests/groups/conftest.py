"""Fixtures for the consumer-group tests: a broker tuned so rebalances and expiries are quick."""

from __future__ import annotations

import warnings

import pytest

from tests.broker_process import BrokerProcess

with warnings.catch_warnings():  # kafka-python loads its protocol through a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

# small initial delay and session-timeout floor: rebalances and expiries take fractions of a second
GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "100",
    "offsets.topic.num.partitions": "4",
    "group.min.session.timeout.ms": "300",
}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    """One broker shared by the tests of a module (each test uses its own topics and groups)."""
    with BrokerProcess(tmp_path_factory.mktemp("gbroker"), overrides=GROUP_OVERRIDES) as b:
        yield b
