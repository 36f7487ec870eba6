"""One admin request to the cluster's controller, for the tools whose APIs only the controller
answers (ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments), each on its own
connection to the broker Metadata names as the controller. A broker that answers NOT_CONTROLLER
(the controller moved) is passed over and the controller is looked up again until the timeout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from appliance.cli.main import CliError
from appliance.errors import ErrorCode

__all__ = ["call", "ask_controller", "Locator"]

_RETRY_S = 0.5
# () -> (controller id, broker id -> (host, port)); from Metadata or from ZooKeeper
Locator = Callable[[], tuple[int, dict[int, tuple[str, int]]]]


def call(host: str, port: int, api_key: int, version: int, body: Any, timeout: float,
         client_id: str = "appliance-cli", security: Any = None) -> Any:
    """Send one request and return its decoded response body (secured as ``security``, a
    client.security.Security, says). Raises OSError / ConnectionError when the broker cannot
    be reached or hangs up."""
    from appliance.client.security import secure
    from appliance.protocol.frames import SIZE, encode_request_frame, response_body_offset
    from appliance.protocol.registry import API_BY_KEY

    api = API_BY_KEY[api_key]

    def read(s: Any, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"broker {host}:{port} closed the connection")
            buf += chunk
        return buf

    with socket.create_connection((host, port), timeout=timeout) as raw:
        s = secure(raw, security, host, port, timeout)
        s.sendall(encode_request_frame(api_key, version, 1, client_id, body))
        (size,) = SIZE.unpack(read(s, SIZE.size))
        frame = memoryview(read(s, size))
        return api.decode_response(version, frame, response_body_offset(api, version, frame))


def ask_controller(locate: Locator, api_key: int, version: int, body: Any, timeout: float,
                   what: str, client_id: str = "appliance-cli", security: Any = None) -> Any:
    """The controller's answer to one request (its top-level ``error_code`` is not
    NOT_CONTROLLER). Raises CliError("<what> failed: ...") when no controller answers in time."""
    deadline = time.monotonic() + timeout
    last = "no controller"
    while True:
        controller, brokers = locate()
        if controller in brokers:
            try:
                answer = call(*brokers[controller], api_key, version, body, timeout, client_id, security)
                if answer.error_code != ErrorCode.NOT_CONTROLLER:
                    return answer
                last = f"broker {controller} is no longer the controller"
            except (OSError, ConnectionError) as e:
                last = f"controller {controller}: {e}"
        if time.monotonic() + _RETRY_S > deadline:
            raise CliError(f"{what} failed: {last}")
        time.sleep(_RETRY_S)
