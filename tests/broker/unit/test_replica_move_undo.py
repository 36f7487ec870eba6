"""The order in which AlterReplicaLogDirs' driver undoes a move that failed after the handoff:
the source takes the partition back before the destination drops its future replica, so that
no crash between the two steps leaves the partition with neither copy (the next start's
sweep_moves removes a future replica whose partition exists elsewhere)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from appliance.broker.handlers import alter_replica_log_dirs as driver
from appliance.errors import ErrorCode
from appliance.shm.layout import HANDOFF_RESULT


class _Disks:
    """The disk workers as the driver sees them: each step's answer, ``fail`` failing one."""

    def __init__(self, fail: str) -> None:
        self.fail = fail
        self.ops: list[tuple[int, str]] = []

    async def submit(self, disk: int, msg_type: int, slot: int, body: bytes) -> SimpleNamespace:
        op = json.loads(body)["op"]
        self.ops.append((disk, op))
        err = ErrorCode.KAFKA_STORAGE_ERROR if op == self.fail else ErrorCode.NONE
        return SimpleNamespace(error_code=err, base_offset=-1, log_start_offset=0,
                               body=HANDOFF_RESULT.struct.pack(10, 0))


def _run(fail: str) -> tuple[int, list[tuple[int, str]]]:
    disks = _Disks(fail)
    ctx = SimpleNamespace(disks=disks, config=SimpleNamespace(log_dirs=["/d0", "/d1"]),
                          readers=SimpleNamespace(forget=lambda topic: None))
    code = asyncio.run(driver._run_steps(ctx, "t", 0, slot=3, src=0, dest=1))
    return code, disks.ops


@pytest.mark.parametrize("fail", ["finish", "retire", "switch"])
def test_a_failure_after_the_handoff_resumes_the_source_before_aborting(fail):
    code, ops = _run(fail)
    assert code == ErrorCode.KAFKA_STORAGE_ERROR
    assert ops[ops.index((1 if fail != "retire" else 0, fail)) + 1:] == [(0, "resume"), (1, "abort")]


def test_a_failure_before_the_handoff_only_aborts():
    code, ops = _run("copy")
    assert code == ErrorCode.KAFKA_STORAGE_ERROR
    assert ops == [(1, "copy"), (1, "abort")]


def test_a_move_that_works_deletes_the_source_and_undoes_nothing():
    code, ops = _run("none")
    assert code == ErrorCode.NONE
    assert ops == [(1, "copy"), (0, "handoff"), (1, "finish"), (0, "retire"), (1, "switch"), (0, "delete")]
