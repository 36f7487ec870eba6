"""FindCoordinator for a transactional id (key_type 1) or a group (key_type 0), retried while
the broker says "not now": the coordinators' topic being created, a coordinator loading or
moving."""

from __future__ import annotations

import time
from typing import Any

from appliance.client.cluster import check_error
from appliance.errors import ErrorCode

__all__ = ["find_coordinator", "find_txn_coordinator", "KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION"]

FIND_COORDINATOR = 10
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1
_NOT_NOW = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NOT_COORDINATOR})


def find_txn_coordinator(cluster: Any, transactional_id: str, timeout_s: float) -> tuple[int, str, int]:
    """(node id, host, port) of ``transactional_id``'s coordinator. Raises the broker's error
    (TransactionalIdAuthorizationFailed, ...) or, past ``timeout_s``, the last "not now" one."""
    return find_coordinator(cluster, transactional_id, KEY_TYPE_TRANSACTION, timeout_s)


def find_coordinator(cluster: Any, key: str, key_type: int, timeout_s: float) -> tuple[int, str, int]:
    """(node id, host, port) of the coordinator of ``key``; raises as :func:`find_txn_coordinator`."""
    what = "transaction coordinator" if key_type == KEY_TYPE_TRANSACTION else "group coordinator"
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        resp = cluster.any_connection().request(FIND_COORDINATOR, {"key": key, "key_type": key_type})
        if resp.error_code not in _NOT_NOW or time.monotonic() + delay > deadline:
            check_error(resp.error_code, f"finding the {what} of {key!r}",
                        getattr(resp, "error_message", None))
            return resp.node_id, resp.host, resp.port
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
