"""native.append_plan against its pure-Python twin (storage.append_checks.plan_append_twin)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from appliance.records.batch import build_batch
from appliance.records.record_types import Compression
from appliance.storage.append_checks import plan_append_twin
from native import append_plan as P
from native.batch_layout import CRC_OFFSET

NOW = 1_700_000_000_000


def _request(rng: random.Random, n_batches: int, idempotent: bool) -> bytes:
    parts, base = [], rng.randrange(0, 50)
    for _ in range(n_batches):
        n = rng.randint(1, 12)
        kw = {}
        if idempotent and rng.random() < 0.7:
            kw = dict(producer_id=rng.randrange(0, 5), producer_epoch=rng.randrange(0, 3),
                      base_sequence=rng.randrange(0, 1000))
        b = bytearray(build_batch([(b"k%d" % i, rng.randbytes(rng.randrange(0, 300))) for i in range(n)],
                                  base_timestamp=NOW + rng.randrange(-10**6, 10**6), **kw))
        b[0:8] = base.to_bytes(8, "big")
        base += n + rng.randrange(0, 3)
        parts.append(bytes(b))
    return b"".join(parts)


def _params(rng: random.Random, validate: bool) -> list[int]:
    p = [0] * P.PARAMS_LEN
    p[P.P_MAX_BATCH] = rng.choice([P.NO_LIMIT, 2000, 1 << 20])
    p[P.P_VALIDATE] = int(validate)
    p[P.P_ASSIGN] = rng.choice([0, 1])
    p[P.P_NEXT_OFFSET] = rng.choice([0, 10, 40, 100])
    p[P.P_NOW] = NOW
    p[P.P_TS_DIFF_MAX] = rng.choice([P.NO_LIMIT, 500_000, 2_000_000])
    p[P.P_INDEX_SINCE] = rng.randrange(0, 5000)
    p[P.P_INDEX_INTERVAL] = rng.choice([0, 256, 4096])
    p[P.P_SEG_MAX_TS] = rng.choice([-1, NOW, NOW + 10**7])
    p[P.P_SEG_OFFSET_OF_MAX] = rng.randrange(0, 10)
    return p


def _kernel(buf: bytes, p: list[int], capacity: int = 64):
    params = P.new_params()
    params[:] = p
    rows = P.new_rows(capacity)
    nb = P.plan_append(buf, params, rows)
    if nb < 0:
        return nb, [], ()
    return nb, [tuple(r) for r in rows[:nb].tolist()], tuple(params[P.O_LAST_OFFSET:P.O_FIRST_OFFSET + 1].tolist())


@pytest.mark.parametrize("seed", range(40))
def test_kernel_agrees_with_the_twin(seed):
    rng = random.Random(seed)
    buf = _request(rng, rng.randint(1, 8), idempotent=seed % 2 == 0)
    for validate in (True, False):
        p = _params(rng, validate)
        assert _kernel(buf, p) == plan_append_twin(buf, p)


def _bad(rng: random.Random, buf: bytes) -> bytes:
    x = bytearray(buf)
    kind = rng.randrange(4)
    if kind == 0:
        x[-1] ^= 1  # CRC mismatch
    elif kind == 1:
        x[CRC_OFFSET] ^= 1
    elif kind == 2:
        return bytes(x[:-3])  # truncated
    else:
        x[16] = 1  # magic
    return bytes(x)


@pytest.mark.parametrize("seed", range(12))
def test_bad_and_compressed_requests_go_the_general_way(seed):
    rng = random.Random(100 + seed)
    bad = _bad(rng, _request(rng, rng.randint(1, 4), idempotent=False))
    p = _params(rng, True)
    assert _kernel(bad, p)[0] == P.PLAN_SLOW == plan_append_twin(bad, p)[0]
    gz = build_batch([(b"k", b"v" * 300)] * 5, compression=Compression.GZIP)
    assert _kernel(gz, p)[0] == P.PLAN_SLOW == plan_append_twin(gz, p)[0]
    p[P.P_VALIDATE] = 0  # headers only: a compressed batch is planned like any other
    p[P.P_MAX_BATCH] = P.NO_LIMIT
    p[P.P_TS_DIFF_MAX] = P.NO_LIMIT
    p[P.P_ASSIGN] = 1
    assert _kernel(gz, p) == plan_append_twin(gz, p)
    assert _kernel(gz, p)[0] == 1


def test_too_few_rows_asks_for_more_and_base_offsets_are_written():
    rng = random.Random(7)
    buf = bytearray(_request(rng, 5, idempotent=False))
    p = _params(rng, True)
    p[P.P_MAX_BATCH], p[P.P_TS_DIFF_MAX], p[P.P_ASSIGN] = P.NO_LIMIT, P.NO_LIMIT, 1
    assert _kernel(bytes(buf), p, capacity=4)[0] == P.PLAN_MORE_ROWS
    nb, rows, _ = _kernel(bytes(buf), p, capacity=5)
    assert nb == 5
    P.write_base_offsets(buf, np.array(rows, np.int64), nb)
    assert [int.from_bytes(buf[r[P.R_POS]:r[P.R_POS] + 8], "big") for r in rows] == [r[P.R_BASE] for r in rows]
    p[P.P_ASSIGN] = 0  # the rewritten batches now carry exactly the planned offsets
    assert _kernel(bytes(buf), p)[1] == rows
