"""The kernels' numba cache lives in a directory named by a digest of every kernel source, so a
change to any kernel file (a callee inlined into a caller from another file included) is a fresh
cache (native/cache_dir.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from native.cache_dir import source_digest

NATIVE = Path(__file__).resolve().parents[2] / "native"


def test_the_digest_follows_every_source_file(tmp_path):
    copy = tmp_path / "native"
    shutil.copytree(NATIVE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    first = source_digest(copy)
    assert source_digest(copy) == first  # same sources, same cache
    walk = copy / "records_walk.py"
    walk.write_text(walk.read_text() + "\n# changed\n")
    assert source_digest(copy) != first
    walk.write_text(walk.read_text().removesuffix("\n# changed\n"))
    assert source_digest(copy) == first
    (copy / "new_kernel.py").write_text("x = 1\n")
    assert source_digest(copy) != first


_COMPILE_ONE = ("import numba, native\n"
                "from native.records_walk import walk_records\n"
                "from appliance.records.batch import build_batch\n"
                "b = build_batch([(None, b'v')])\n"
                "assert walk_records(b, 61, len(b), 1)[0] == 0\n"
                "print(numba.config.CACHE_DIR)\n")


def _compile_one(env: dict) -> str:
    """Run a fresh process that compiles the record walk; the cache directory it used."""
    out = subprocess.run([sys.executable, "-c", _COMPILE_ONE], env={**os.environ, **env},
                         capture_output=True, text=True, cwd=NATIVE.parent, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_kernels_compile_into_the_versioned_directory(tmp_path):
    """A fresh process with NUMBA_CACHE_DIR set compiles a kernel into <dir>/kernels-<digest>."""
    expected = tmp_path / f"kernels-{source_digest()}"
    assert _compile_one({"NUMBA_CACHE_DIR": str(tmp_path)}) == str(expected)
    cached = [p.name for p in expected.rglob("*.nbi")]
    assert any(name.startswith("records_walk._walk") for name in cached), cached
    assert [p.name for p in tmp_path.iterdir()] == [expected.name]  # nothing beside it


def test_an_unwritable_cache_dir_falls_back_to_a_versioned_one(tmp_path):
    """NUMBA_CACHE_DIR that cannot be made (a file stands in the way): the versioned directory
    goes under numba's per-user cache instead, not to numba's unversioned fall-backs."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    xdg = tmp_path / "xdg"
    used = _compile_one({"NUMBA_CACHE_DIR": str(blocker / "numba"), "XDG_CACHE_HOME": str(xdg)})
    assert used == str(xdg / "numba" / f"kernels-{source_digest()}")
    assert any(p.name.startswith("records_walk._walk") for p in Path(used).rglob("*.nbi"))
