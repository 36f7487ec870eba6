"""process/port_check.py: the supervisor's look at a port before it forks."""

from __future__ import annotations

import socket

from appliance.process.port_check import bind_error


def test_a_listening_port_is_named_taken_and_a_free_one_is_not():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert bind_error("127.0.0.1", port) == "Address already in use"
    assert bind_error("127.0.0.1", port) is None  # closed: free again (SO_REUSEADDR)
