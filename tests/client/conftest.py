"""Fixtures for the client tests: one broker per module (tests use their own topic names)."""

from __future__ import annotations

import itertools
import warnings

import pytest

from tests.broker_process import BrokerProcess

with warnings.catch_warnings():  # kafka-python's import-time deprecation noise
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}
_names = itertools.count()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"), overrides=FAST_GROUPS) as b:
        yield b


@pytest.fixture
def topic_name(request):
    """A topic name unique within the session."""
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{next(_names)}"
