"""libc's ``write``/``writev`` and ``errno`` for the numba kernels, and raw stores by address.

Why a kernel makes system calls: the one-batch produce append did ~4 us of Python around its
~9 us ``write`` (the writev pieces, the index entries, the state copied in and out of the plan
kernel); with the write inside the append kernel (native.append_commit) all of it is one call.

The functions are called through their addresses, passed in as ints (see :data:`LIBC_WRITE`):
a kernel that referenced a ctypes function object would bake the address in and numba would
refuse to cache it (libc moves with every process under ASLR). Pointers are passed as int64,
which the x86-64 and AArch64 C calling conventions pass exactly like ``void *``.
"""

from __future__ import annotations

import ctypes

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = [
    "LIBC_WRITE", "LIBC_WRITEV", "LIBC_ERRNO_LOCATION", "LIBC_CLOCK_GETTIME", "EINTR",
    "IOV_MAX", "CLOCK_REALTIME",
    "call_write", "call_errno", "store_be64",
]

_libc = ctypes.CDLL(None, use_errno=True)
#: Addresses of ``write``, ``writev`` and ``__errno_location`` in this process.
LIBC_WRITE: int = ctypes.cast(_libc.write, ctypes.c_void_p).value
LIBC_WRITEV: int = ctypes.cast(_libc.writev, ctypes.c_void_p).value
LIBC_ERRNO_LOCATION: int = ctypes.cast(_libc.__errno_location, ctypes.c_void_p).value
#: ``int clock_gettime(clockid_t, struct timespec *)``: called with call_write's signature
#: (the third argument is ignored), a ``timespec`` being two int64 on 64-bit Linux.
LIBC_CLOCK_GETTIME: int = ctypes.cast(_libc.clock_gettime, ctypes.c_void_p).value
CLOCK_REALTIME = 0
EINTR = 4
#: iovecs per writev call (Linux's UIO_MAXIOV)
IOV_MAX = 1024

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


@intrinsic
def call_write(typingctx, fn, fd, ptr, n):
    """``fn(fd, ptr, n)`` for ``fn`` the address of ``ssize_t f(int, const void *, size_t)``
    (write; writev with an iovec array and its count). Returns the result as int64."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(_I64, [_I32, _I64, _I64])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.call(f, [builder.trunc(args[1], _I32), args[2], args[3]])

    return sig, codegen


@intrinsic
def call_errno(typingctx, fn):
    """This thread's ``errno``, ``fn`` being the address of ``int *__errno_location(void)``."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(_I32.as_pointer(), [])
        f = builder.inttoptr(args[0], fnty.as_pointer())
        return builder.sext(builder.load(builder.call(f, [])), _I64)

    return sig, codegen


@intrinsic
def store_be64(typingctx, addr, value):
    """Store ``value`` big-endian at byte address ``addr`` (no alignment needed). A kernel
    compiled for read-only and writable buffers alike cannot assign to the array (numba
    refuses to type it for the read-only one); the caller tells it when writing is allowed."""
    sig = types.void(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        bswap = builder.module.declare_intrinsic("llvm.bswap", [_I64])
        p = builder.inttoptr(args[0], _I64.as_pointer())
        builder.store(builder.call(bswap, [args[1]]), p, align=1)
        return context.get_dummy_value()

    return sig, codegen
