"""The planned append (one native call per request) against the general path: the same files,
the same AppendInfos, the same errors, on real segment files."""

from __future__ import annotations

import os
import random

import pytest

from appliance.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from appliance.records.batch import build_batch

from .conftest import Clock, cfg, open_log


def _requests(seed: int, idempotent: bool) -> list[bytes | bytearray]:
    rng = random.Random(seed)
    out, seq = [], 0
    for i in range(120):
        parts, base = [], 0
        for _ in range(rng.choice([1, 1, 2, 5, 70])):  # 70: the array (vector) index path
            n = rng.randint(1, 6)
            kw = dict(producer_id=9, producer_epoch=0, base_sequence=seq) if idempotent else {}
            seq += n
            b = bytearray(build_batch([(b"k", rng.randbytes(rng.randrange(1, 120))) for _ in range(n)],
                                      base_timestamp=1_700_000_000_000 + rng.randrange(-5000, 5000), **kw))
            b[:8] = base.to_bytes(8, "big")  # batches of one request: increasing offsets
            base += n
            parts.append(bytes(b))
        req = b"".join(parts)
        out.append(bytearray(req) if i % 2 else req)  # writable (ring) and read-only (bytes)
    return out


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith((".log", ".index", ".timeindex")):
            with open(os.path.join(path, f), "rb") as fh:
                out[f] = fh.read()
    return out


@pytest.mark.parametrize("idempotent", [False, True])
def test_planned_and_general_paths_write_the_same_log(tmp_path, idempotent):
    config = cfg(segment_bytes=64 * 1024)  # rolls in the middle of the run
    infos, files = [], []
    for planned in (True, False):
        path = os.path.join(str(tmp_path), f"t{int(planned)}-0")
        lg = open_log(path, config, clock=Clock())
        lg._plannable = planned
        got = []
        for i, req in enumerate(_requests(3, idempotent)):
            got.append(lg.append(bytes(req) if isinstance(req, bytes) else bytearray(req)))
            if idempotent and i % 17 == 5 and got[-1].num_batches == 1:
                # a retried request (the broker keeps the last 5 batches): a duplicate
                got.append(lg.append(bytes(req)))
        assert len(lg.segments()) > 2
        lg.close()
        infos.append(got)
        files.append(_files(path))
    assert infos[0] == infos[1]
    assert files[0] == files[1]
    if idempotent:
        assert any(i.duplicate for i in infos[0])


def test_planned_path_refuses_what_the_general_path_refuses(log_path):
    lg = open_log(log_path)
    assert lg._plannable
    lg.append(build_batch([(b"k", b"v")] * 3, producer_id=4, producer_epoch=1, base_sequence=0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(build_batch([(b"k", b"v")], producer_id=4, producer_epoch=1, base_sequence=7))
    with pytest.raises(InvalidProducerEpochError):
        lg.append(build_batch([(b"k", b"v")], producer_id=4, producer_epoch=0, base_sequence=3))
    assert lg.log_end_offset == 3
    buf = bytearray(build_batch([(b"k", b"v")] * 2))
    info = lg.append(buf)
    assert (info.first_offset, info.last_offset, info.duplicate) == (3, 4, False)
    assert int.from_bytes(buf[:8], "big") == 3  # rewritten in place, after the checks
