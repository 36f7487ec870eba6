"""LLVM-level helpers for the numba kernels: unaligned loads, byte copies, the SSE4.2 ``crc32``
instruction and a full memory fence.

Each is a ``numba.extending.intrinsic``: it only emits IR, so it is inlined into the calling
kernel and works with ``cache=True`` (the cached object code contains the instruction).

The SSE4.2 intrinsics may only be *called* from code compiled when :data:`native.cpu.HAS_SSE42`
is true; LLVM cannot lower them for a target without the feature.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["load_u64_le", "copy_bytes", "sse42_crc32_u64", "sse42_crc32_u8", "full_fence",
           "array_is_writable", "buffer_address"]

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


@intrinsic
def load_u64_le(typingctx, arr, idx):
    """``uint64`` from the 8 bytes at ``arr[idx:idx+8]`` (host order, i.e. little-endian on x86).
    ``arr``: a 1-D uint8 array, or bytes, bytearray or a memoryview of bytes (numba's buffers
    share the array's data model).

    No bounds check: the caller guarantees ``idx + 8 <= len(arr)``.
    """
    if not (isinstance(arr, types.Buffer) and arr.dtype == types.uint8 and arr.ndim == 1):
        return None
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        # Byte arrays from the kernels' wrappers are contiguous, so data + idx is the address.
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.gep(ary.data, [idx])
        return builder.load(builder.bitcast(ptr, _I64.as_pointer()), align=1)

    return sig, codegen


@intrinsic
def copy_bytes(typingctx, dst, dst_pos, src, src_pos, n):
    """``dst[dst_pos:dst_pos+n] = src[src_pos:src_pos+n]`` as one ``llvm.memcpy``.

    Why not the slice assignment: numba's generic setitem (shape check, overlap check, an
    element loop) copies a 100-byte value in ~33 ns, a memcpy in ~3-8 ns (perf/README.md).
    No bounds check and no overlap handling: the caller guarantees both ranges lie inside
    their (contiguous, byte) arrays and do not overlap.
    """
    for arr in (dst, src):
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint8 and arr.ndim == 1
                and arr.layout == "C"):
            return None
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        dp = builder.gep(d.data, [context.cast(builder, args[1], signature.args[1], types.intp)])
        sp = builder.gep(s.data, [context.cast(builder, args[3], signature.args[3], types.intp)])
        cgutils.raw_memcpy(builder, dp, sp,
                           context.cast(builder, args[4], signature.args[4], types.intp), 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sse42_crc32_u64(typingctx, crc, word):
    """One ``crc32 r64, r64`` step (CRC32C polynomial, raw state: no pre/post inversion)."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I64, [_I64, _I64]), "llvm.x86.sse42.crc32.64.64"
        )
        return builder.call(fn, [args[0], args[1]])

    return sig, codegen


@intrinsic
def sse42_crc32_u8(typingctx, crc, byte):
    """One ``crc32 r32, r8`` step (CRC32C polynomial, raw state)."""
    sig = types.uint64(types.uint64, types.uint8)

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I32, [_I32, _I8]), "llvm.x86.sse42.crc32.32.8"
        )
        res = builder.call(fn, [builder.trunc(args[0], _I32), args[1]])
        return builder.zext(res, _I64)

    return sig, codegen


@intrinsic
def full_fence(typingctx):
    """A sequentially consistent fence (``mfence`` on x86): stores before it are visible to other
    cores before any load after it. x86 keeps store order, but may let a later load pass an
    earlier store: a "set my flag, then read yours" handshake needs this between the two."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def buffer_address(typingctx, arr):
    """The address of the first element of a contiguous array or buffer (bytes, bytearray,
    memoryview), as int64: for handing the caller's bytes to a system call."""
    if not isinstance(arr, types.Buffer):
        return None
    sig = types.int64(arr)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.ptrtoint(ary.data, _I64)

    return sig, codegen


@intrinsic
def array_is_writable(typingctx, arr):
    """Whether ``arr``'s numba type is a writable array: a constant of the compiled kernel (a
    read-only buffer, e.g. bytes, gets its own compilation), so the caller need not say."""
    if not isinstance(arr, types.Buffer):
        return None
    sig = types.boolean(arr)
    writable = bool(arr.mutable)

    def codegen(context, builder, signature, args):
        return context.get_constant(types.boolean, writable)

    return sig, codegen
