"""Which CPU features the native kernels may use, decided once at import."""

from __future__ import annotations

import os
import platform

from llvmlite import binding as _llvm
from numba.core import config as _numba_config

__all__ = ["HAS_SSE42", "FORCE_TABLE_ENV", "TABLE_FORCED"]

#: Set this environment variable to 1 to force the portable table kernels (testing, debugging).
FORCE_TABLE_ENV = "APPLIANCE_NATIVE_NO_SSE42"


#: True when the environment forced the table kernels for this process.
TABLE_FORCED: bool = os.environ.get(FORCE_TABLE_ENV, "") not in ("", "0")


def _detect_sse42() -> bool:
    if TABLE_FORCED:
        return False
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    # numba compiles for NUMBA_CPU_NAME/NUMBA_CPU_FEATURES when set (portable caches); the
    # instruction is only usable if that target has it, whatever the host has.
    features = _numba_config.CPU_FEATURES
    if features:
        return "+sse4.2" in features.split(",")
    if _numba_config.CPU_NAME not in (None, "", "host"):
        return False
    try:
        return bool(_llvm.get_host_cpu_features().get("sse4.2", False))
    except RuntimeError:  # llvmlite cannot query this host
        return False


#: True when the SSE4.2 ``crc32`` instruction is used for CRC32C.
HAS_SSE42: bool = _detect_sse42()
