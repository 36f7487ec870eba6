"""CRC32C / CRC32 kernels against the crc32c package, zlib and the pure-Python twins."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import zlib
from pathlib import Path

import crc32c as crc32c_pkg
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from native import crc32, crc32_update, crc32c, crc32c_update
from native.cpu import FORCE_TABLE_ENV
from native.crc import _LONG, _MEDIUM, _SHORT, CRC32C_IMPL, crc32c_table
from native.twins import crc32_twin, crc32c_twin

REPO = Path(__file__).resolve().parents[2]

# Lengths around every branch of the kernels: 8-byte words and each tier's 3-block rounds
# (the tiers' sizes from the kernel's own declaration, so a change there keeps them covered).
EDGE_LENGTHS = sorted({
    *range(0, 20), 16675,
    *(n for block in (_SHORT, _MEDIUM, _LONG) for n in (
        block - 1, block, block + 1, 3 * block - 1, 3 * block, 3 * block + 1,
        3 * block + 3 * _SHORT + 9, 3 * block + 7, 2 * 3 * block + 5)),
})


def test_check_values() -> None:
    # The published check values of both CRCs, over the ASCII digits 1..9.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32(b"123456789") == 0xCBF43926


def test_sse42_used_when_cpu_has_it() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists() or "sse4_2" not in cpuinfo.read_text():
        pytest.skip("CPU without SSE4.2")
    assert CRC32C_IMPL == "sse4.2"


@pytest.mark.parametrize("n", EDGE_LENGTHS)
def test_edge_lengths_match_references(n: int) -> None:
    data = np.random.default_rng(n).integers(0, 256, n + 3, dtype=np.uint8)
    for s in (0, 1, 3):  # unaligned starts too
        chunk = data[s:s + n].tobytes()
        expected = crc32c_pkg.crc32c(chunk)
        assert crc32c(data, s, s + n) == expected
        assert crc32c_table(data, s, s + n) == expected
        assert crc32(data, s, s + n) == zlib.crc32(chunk)


def test_twins_on_edge_lengths() -> None:
    rng = np.random.default_rng(1)
    for n in EDGE_LENGTHS:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == crc32c_twin(data)
        assert crc32(data) == crc32_twin(data)


def test_large_buffer() -> None:
    data = np.random.default_rng(7).integers(0, 256, (8 << 20) + 13, dtype=np.uint8)
    assert crc32c(data) == crc32c_pkg.crc32c(data)
    assert crc32c_table(data) == crc32c_pkg.crc32c(data)
    assert crc32(data) == zlib.crc32(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.data())
def test_random_ranges_match_twins_and_references(data: bytes, draw: st.DataObject) -> None:
    start = draw.draw(st.integers(0, len(data)))
    end = draw.draw(st.integers(start, len(data)))
    chunk = data[start:end]
    expected_c = crc32c_pkg.crc32c(chunk)
    assert crc32c(data, start, end) == expected_c == crc32c_twin(data, start, end)
    assert crc32c_table(data, start, end) == expected_c
    assert crc32(data, start, end) == zlib.crc32(chunk) == crc32_twin(data, start, end)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=2000))
def test_update_chains(a: bytes, b: bytes) -> None:
    assert crc32c_update(crc32c(a), b) == crc32c(a + b)
    assert crc32_update(crc32(a), b) == zlib.crc32(b, zlib.crc32(a))


def test_end_minus_one_means_to_the_end() -> None:
    data = bytes(range(200))
    assert crc32c(data, 10) == crc32c(data, 10, -1) == crc32c_pkg.crc32c(data[10:])
    assert crc32(data, 10, -1) == zlib.crc32(data[10:])


def test_buffer_types(tmp_path: Path) -> None:
    payload = os.urandom(5000)
    expected = crc32c_pkg.crc32c(payload)
    path = tmp_path / "seg"
    path.write_bytes(payload)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert crc32c(mm) == expected
        assert crc32(mm, 100, 200) == zlib.crc32(payload[100:200])
    as_u32 = np.frombuffer(payload[:4000], dtype=np.uint32)  # other dtypes: their bytes count
    for buf in (payload, bytearray(payload), memoryview(payload),
                np.frombuffer(payload, np.uint8), np.frombuffer(payload, np.uint8).copy()):
        assert crc32c(buf) == expected
    assert crc32c(as_u32) == crc32c_pkg.crc32c(payload[:4000])
    assert crc32c(memoryview(payload).cast("I", (1250,))) == expected


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        crc32c("text")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        crc32c(memoryview(bytes(100))[::2])
    with pytest.raises(ValueError):
        crc32c(np.zeros((4, 4), np.uint8)[:, 0])
    for start, end in ((-1, 5), (5, 4), (0, 11), (0, -2), (11, -1)):
        with pytest.raises(ValueError):
            crc32c(bytes(10), start, end)
        with pytest.raises(ValueError):
            crc32(bytes(10), start, end)
    for bad in (-1, 1 << 32):
        with pytest.raises(ValueError):
            crc32c_update(bad, b"x")


def _fresh_python(code: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, **env}, check=True,
    )
    return out.stdout.strip()


def test_cached_kernels_work_in_fresh_processes() -> None:
    # Twice: the second process loads the on-disk cache (intrinsics included) instead of compiling.
    code = (
        "import crc32c, zlib, os; from native import crc32c as c, crc32; "
        "from native.crc import CRC32C_IMPL; d = os.urandom(100003); "
        "print(CRC32C_IMPL, c(d) == crc32c.crc32c(d), crc32(d) == zlib.crc32(d))"
    )
    first = _fresh_python(code)
    second = _fresh_python(code)
    assert first.endswith("True True") and first == second
    # in the kernels' versioned cache directory (native/cache_dir.py)
    cache = Path(_fresh_python("import numba, native; print(numba.config.CACHE_DIR)"))
    assert cache.name.startswith("kernels-") and list(cache.rglob("crc.*.nbi"))


def test_forced_table_fallback_in_fresh_process() -> None:
    code = (
        "import crc32c, os; from native import crc32c as c; from native.crc import CRC32C_IMPL; "
        "d = os.urandom(70001); print(CRC32C_IMPL, c(d) == crc32c.crc32c(d)); "
        "from tests.native.batches import make_log; from native import scan_batches; "
        "log, _ = make_log(3); bad = log[:-1] + bytes([log[-1] ^ 1]); "
        "print(scan_batches(log).count, scan_batches(bad).stop_reason.name)"
    )
    out = _fresh_python(code, **{FORCE_TABLE_ENV: "1"})
    assert out.splitlines() == ["table True", "3 BAD_CRC"]
