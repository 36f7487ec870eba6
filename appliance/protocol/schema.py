"""Declarative message schemas, compiled once per version into fast encoders/decoders.

A message is declared once, the way Kafka's ``*Request.json`` files do it::

    class Heartbeat(ApiMessage):
        API_KEY, MIN_VERSION, MAX_VERSION = 12, 0, 1
        REQUEST = (Field("group_id", String), Field("generation_id", Int32), ...)
        RESPONSE = (Field("throttle_time_ms", Int32, versions="1+"), Field("error_code", Int16))

Defining the class checks the declaration (field version ranges must meet the message's
range, nullable ranges must lie inside the field's and have a nullable type, no duplicate
names or tags, tagged fields only in flexible versions) and builds the data classes. The
codecs are compiled lazily: each (message, version, request/response) gets its decoder and
its encoder as generated Python functions on its first decode or encode, then cached, so an
import compiles none of the ~1,000 and a process pays only for what it speaks
(``ApiMessage.compile_codecs`` compiles them all; the schema tests do, so a declaration that
cannot compile still fails the suite). Runs of fixed-size fields become one
``struct.unpack_from``/``pack`` call on a memoryview, no BytesIO.

Decoded values are instances of generated slotted classes (``Heartbeat.Request``,
``Fetch.Response.Responses.Partitions`` ...) holding every field of every version; fields
absent from the decoded version hold their defaults. Encoders accept those instances, any
object with the attributes, or plain dicts; missing fields take their defaults, and a dict key
that names no field of the message (in any version) is refused with a ProtocolEncodeError
naming the key, the struct and the version, so a misspelling cannot silently send a default.

Everything built here is immutable once built and safe to use from many threads: a codec is
published in its cache only whole (a reader sees no entry or a finished function); two threads
missing the same one both compile it, and the later store replaces an identical function.
"""

from __future__ import annotations

import re
import struct
from typing import Any, ClassVar

from appliance.errors import UnsupportedVersionError
from appliance.protocol.errors import ProtocolDecodeError, ProtocolEncodeError
from appliance.protocol.types import (
    Array,
    CompactArray,
    WireType,
    compact,
    encode_uvarint,
    truncated,
    uvarint_at,
    write_compact_records,
    write_records,
)

__all__ = ["Field", "Struct", "Data", "ApiMessage", "SchemaError", "parse_versions"]

_MAX_VERSION = 0x7FFF
_MISSING: Any = object()
_pack_i32 = struct.Struct(">i").pack
_NULL32 = _pack_i32(-1)


class SchemaError(TypeError):
    """A message declaration is inconsistent (raised at import time)."""


def parse_versions(spec: str) -> tuple[int, int]:
    """Kafka's version-range syntax: "3", "3+", "2-7" -> inclusive (lo, hi)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:(\+)|-\s*(\d+))?\s*", spec)
    if not m:
        raise SchemaError(f"bad version range {spec!r}")
    lo = int(m.group(1))
    hi = _MAX_VERSION if m.group(2) else int(m.group(3) or lo)
    if hi < lo:
        raise SchemaError(f"empty version range {spec!r}")
    return lo, hi


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


class Field:
    """One field: name, wire type (a WireType, a Struct, or Array(Struct)), the versions it
    exists in, optionally the versions it is nullable in (``nullable=True`` = all), and the
    default used when encoding a value that lacks it / decoding a version without it."""

    __slots__ = ("name", "type", "versions", "nullable_versions", "default", "tag")

    def __init__(self, name: str, type: Any, versions: str = "0+", *, nullable: bool | str = False,
                 default: Any = _MISSING, tag: int | None = None) -> None:
        if not name.isidentifier() or name.startswith("_"):
            raise SchemaError(f"bad field name {name!r}")
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        # A tagged field (KIP-482) lives in its struct's tagged section in flexible versions,
        # written only when it differs from its default; its versions must all be flexible.
        if tag is not None and not (isinstance(tag, int) and 0 <= tag <= 0x7FFFFFFF):
            raise SchemaError(f"field {name}: bad tag {tag!r}")
        self.tag = tag
        if nullable and isinstance(type, Struct) and tag is None:
            # Kafka's null struct marker (int8 -1) is not used by any API we speak; a tagged
            # struct field is simply absent (None) when null.
            raise SchemaError(f"field {name}: a plain struct cannot be nullable")
        if nullable is True:
            self.nullable_versions: tuple[int, int] | None = self.versions
        elif nullable:
            self.nullable_versions = parse_versions(nullable)
            lo, hi = self.nullable_versions
            if lo < self.versions[0] or hi > self.versions[1]:
                raise SchemaError(f"field {name}: nullable versions {nullable!r} outside its versions")
        else:
            self.nullable_versions = None
        if self.nullable_versions is not None and not isinstance(type, Struct):
            try:  # checked here, not first when a codec compiles (type_for)
                type.as_nullable()
            except (TypeError, AttributeError):
                raise SchemaError(f"field {name}: {type!r} has no nullable variant") from None
        if default is _MISSING:
            default = None if isinstance(type, Struct) else type.default
        self.default = default

    def in_version(self, v: int) -> bool:
        return self.versions[0] <= v <= self.versions[1]

    def type_for(self, v: int, flexible: bool = False) -> Any:
        """The wire type in version v: nullable where declared so, compact in flexible ones."""
        t = self.type
        nv = self.nullable_versions
        if nv is not None and nv[0] <= v <= nv[1] and not isinstance(t, Struct):
            t = t.as_nullable()
        return compact(t) if flexible else t

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, versions={self.versions})"


class Struct:
    """A nested group of fields; ``Array(Struct(...))`` is Kafka's struct array.

    After its message compiles, ``data_class`` is the generated class for its values.
    """

    def __init__(self, *fields: Field) -> None:
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, Field):
                raise SchemaError(f"Struct members must be Field, got {f!r}")
            if f.name in seen:
                raise SchemaError(f"duplicate field name {f.name!r}")
            seen.add(f.name)
        self.fields = fields
        self.name: str | None = None  # the qualified name, set when its message compiles
        self.data_class: type[Data] | None = None
        self.flex_lo = _MAX_VERSION + 1  # first flexible version, set when its message compiles
        self.versions = (0, -1)  # the versions it has codecs in (top level), set when it compiles
        self._decoders = _Codecs(self, _gen_decoder)  # version -> decoder, built on first use
        self._encoders = _Codecs(self, _gen_encoder)
        self._min_sizes: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"Struct({self.name or '?'})"

    # -- compile ---------------------------------------------------------------------------

    def _compile(self, qualname: str, lo: int, hi: int, top: bool = True,
                 flex_lo: int = _MAX_VERSION + 1) -> None:
        """Check the declaration and build the data classes. The top-level struct's codecs,
        one encoder and one decoder per version in lo..hi (nested structs are inlined into
        them), are compiled on first use (``decoder``, ``encoder``)."""
        tags: set[int] = set()
        for f in self.fields:
            if f.versions[1] < lo or f.versions[0] > hi:
                raise SchemaError(f"{qualname}.{f.name}: versions {f.versions} outside {lo}-{hi}")
            _check_type(f.type, f"{qualname}.{f.name}")
            if f.tag is not None:
                if f.versions[0] < flex_lo:
                    raise SchemaError(f"{qualname}.{f.name}: tagged in non-flexible versions")
                if f.tag in tags:
                    raise SchemaError(f"{qualname}.{f.name}: duplicate tag {f.tag}")
                tags.add(f.tag)
        self.name = qualname
        self.flex_lo = flex_lo
        self.data_class = _make_data_class(qualname, self.fields)
        for f in self.fields:
            sub = _struct_of(f.type)
            if sub is not None:
                sub._compile(f"{qualname}.{_camel(f.name)}", max(lo, f.versions[0]),
                             min(hi, f.versions[1]), top=False, flex_lo=flex_lo)
                setattr(self.data_class, _camel(f.name), sub.data_class)
        if top:
            self.versions = (lo, hi)

    def decoder(self, v: int) -> Any:
        """The decoder of version v, ``(buf, pos) -> (value, end)``, compiled on first use."""
        return self._decoders[v]

    def encoder(self, v: int) -> Any:
        """The encoder of version v, ``(value, out, parts) -> None``, compiled on first use."""
        return self._encoders[v]

    def flexible(self, v: int) -> bool:
        return v >= self.flex_lo

    def min_size(self, v: int) -> int:
        if v not in self._min_sizes:
            flex = self.flexible(v)
            total = 1 if flex else 0  # the tagged-field count
            for f in self.fields:
                if f.in_version(v) and not (flex and f.tag is not None):
                    t = f.type_for(v, flex)
                    total += t.min_size(v) if isinstance(t, Struct) else t.min_size
            self._min_sizes[v] = total
        return self._min_sizes[v]


class _Codecs(dict):
    """One struct's codecs of one direction, version -> generated function, each compiled
    on its first lookup (``__missing__``), so the hot path stays one dict subscript.

    A codec is stored only once whole: a reader sees no entry or a finished function. Two
    threads missing the same version both compile it; the later store replaces an identical
    function, which is harmless."""

    __slots__ = ("_struct", "_gen")

    def __init__(self, s: Struct, gen: Any) -> None:
        super().__init__()
        self._struct = s
        self._gen = gen

    def __missing__(self, v: int) -> Any:
        s = self._struct
        lo, hi = s.versions
        if not lo <= v <= hi:  # also nested structs: their code is inlined in their message's
            raise KeyError(f"{s.name}: no codec for version {v} (has {lo}-{hi})")
        fn = self._gen(s, v)
        self[v] = fn
        return fn


def _check_type(t: Any, label: str) -> None:
    """A field's type must be a wire type, a Struct, or an Array of either (cheap, at import,
    so a slip fails there and not first when a codec compiles)."""
    if isinstance(t, Array):
        _check_type(t.element, label)
    elif not isinstance(t, WireType | Struct):
        raise SchemaError(f"{label}: {t!r} is neither a wire type nor a Struct")


def _struct_of(t: Any) -> Struct | None:
    if isinstance(t, Struct):
        return t
    if isinstance(t, Array) and isinstance(t.element, Struct):
        return t.element
    return None


# --- generated data classes -----------------------------------------------------------------

class Data:
    """Base of generated value classes: slotted, compared by value, printable."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict/list copy (Records/bytes values are kept as they are)."""
        def conv(x: Any) -> Any:
            if isinstance(x, Data):
                return x.to_dict()
            if isinstance(x, list):
                return [conv(e) for e in x]
            return x
        return {f: conv(getattr(self, f)) for f in self._fields}


def _is_mutable_default(f: Field) -> bool:
    return isinstance(f.default, list | dict) or (isinstance(f.type, Array) and f.default == ())


def _make_data_class(qualname: str, fields: tuple[Field, ...]) -> type[Data]:
    ns: dict[str, Any] = {"_MISSING": _MISSING}
    params, body = [], []
    for i, f in enumerate(fields):
        if _is_mutable_default(f):
            # fresh list per instance: never share a mutable default
            params.append(f"{f.name}=_MISSING")
            body.append(f"    self.{f.name} = [] if {f.name} is _MISSING else {f.name}")
        else:
            ns[f"_d{i}"] = f.default
            params.append(f"{f.name}=_d{i}")
            body.append(f"    self.{f.name} = {f.name}")
    src = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    if not params:
        src = "def __init__(self):\n    pass\n"
    exec(compile(src, f"<schema {qualname}.__init__>", "exec"), ns)
    names = tuple(f.name for f in fields)
    cls = type(qualname.rsplit(".", 1)[-1], (Data,), {
        "__slots__": names, "_fields": names, "__init__": ns["__init__"], "__qualname__": qualname,
        "__module__": "appliance.protocol.messages",
    })
    return cls


# --- code generation ------------------------------------------------------------------------
#
# One decoder and one encoder function per top-level message and version, with nested structs
# inlined (no call per element). Decoders keep every safety check: lengths and counts are
# validated against the bytes that remain before anything is sliced, allocated or looped.
# struct.error (short fixed-size read) and UnicodeDecodeError are caught by the caller.

class _Gen:
    """Accumulates generated source lines and the constants they reference."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {}
        self._n = 0

    def var(self, stem: str = "x") -> str:
        self._n += 1
        return f"{stem}{self._n}"

    def const(self, value: Any, stem: str = "_k") -> str:
        name = self.var(stem)
        self.ns[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def build(self, name: str, label: str) -> Any:
        src = "\n".join(self.lines) + "\n"
        exec(compile(src, f"<{label}>", "exec"), self.ns)
        return self.ns[name]


def _decode_error(kind: str, value: int, pos: int, remaining: int = -1) -> ProtocolDecodeError:
    if kind == "null":
        return ProtocolDecodeError(f"null (length -1) in a non-nullable field at offset {pos}")
    if kind == "count":
        return ProtocolDecodeError(
            f"array count {value} at offset {pos} needs more bytes than remain ({remaining})")
    if kind == "short":
        return truncated(f"field of {value} bytes", pos)
    return ProtocolDecodeError(f"invalid {kind} {value} at offset {pos}")


def _emit_uvarint(g: _Gen, ind: int, dst: str) -> None:
    """Emit code reading an unsigned varint into ``dst`` (one byte inline, the rare longer
    ones through types.uvarint_at; a read past the end raises IndexError = truncated)."""
    g.emit(ind, f"{dst} = buf[pos]")
    g.emit(ind, f"if {dst} < 128:")
    g.emit(ind + 1, "pos += 1")
    g.emit(ind, "else:")
    g.emit(ind + 1, f"{dst}, pos = _uv(buf, pos)")


def _emit_decode_struct(g: _Gen, s: Struct, v: int, target: str, ind: int) -> None:
    """Emit code that decodes struct s (version v) into a new object bound to ``target``."""
    flex = s.flexible(v)
    cls = g.const(s.data_class, "_C")
    g.emit(ind, f"{target} = _new({cls})")
    run: list[tuple[str, str]] = []
    tagged: list[Field] = []

    def flush() -> None:
        if run:
            st = struct.Struct(">" + "".join(fm for _, fm in run))
            u = g.const(st.unpack_from, "_u")
            targets = ", ".join(f"{target}.{n}" for n, _ in run)
            g.emit(ind, f"{targets}, = {u}(buf, pos)")
            g.emit(ind, f"pos += {st.size}")
            run.clear()

    for f in s.fields:
        dst = f"{target}.{f.name}"
        if not f.in_version(v) or (flex and f.tag is not None):
            g.emit(ind, f"{dst} = []" if _is_mutable_default(f) else f"{dst} = {g.const(f.default, '_d')}")
            if f.in_version(v):
                tagged.append(f)
            continue
        t = f.type_for(v, flex)
        if getattr(t, "fmt", None) is not None:
            run.append((f.name, t.fmt))
            continue
        flush()
        _emit_decode_value(g, t, v, dst, ind)
    flush()
    if flex:
        _emit_decode_tagged(g, s, v, target, tagged, ind)


def _emit_decode_tagged(g: _Gen, s: Struct, v: int, target: str, tagged: list[Field], ind: int) -> None:
    """The tagged-field section: known tags decode into their fields (bounded by their
    size), unknown ones are skipped, as Kafka does."""
    n = g.var("nt")
    _emit_uvarint(g, ind, n)
    g.emit(ind, f"if {n}:")
    g.emit(ind + 1, f"if {n} * 2 > end - pos: raise _err('count', {n}, pos, end - pos)")
    g.emit(ind + 1, f"for _ in range({n}):")
    tag, size, tend = g.var("tg"), g.var("ts"), g.var("te")
    i2 = ind + 2
    _emit_uvarint(g, i2, tag)
    _emit_uvarint(g, i2, size)
    g.emit(i2, f"{tend} = pos + {size}")
    g.emit(i2, f"if {tend} > end: raise _err('short', {size}, pos)")
    for k, f in enumerate(sorted(tagged, key=lambda f: f.tag)):
        g.emit(i2, f"{'if' if k == 0 else 'elif'} {tag} == {f.tag}:")
        t = f.type_for(v, True)
        if isinstance(t, Struct):
            dec = g.const(_gen_decoder(t, v, nested=True), "_td")
        else:
            dec = g.const(t.decode, "_td")
        p2 = g.var("p")
        g.emit(i2 + 1, f"{target}.{f.name}, {p2} = {dec}(buf[:{tend}], pos)")
        g.emit(i2 + 1, f"if {p2} != {tend}: raise _err('tagged field size', {size}, pos)")
    g.emit(i2, f"pos = {tend}")


def _emit_decode_value(g: _Gen, t: Any, v: int, dst: str, ind: int) -> None:
    from appliance.protocol.types import (
        Bytes,
        CompactBytes,
        CompactNullableBytes,
        CompactNullableString,
        CompactRecords,
        CompactString,
        NullableBytes,
        NullableString,
        Records,
        String,
    )

    if isinstance(t, Struct):
        tmp = g.var("o")
        _emit_decode_struct(g, t, v, tmp, ind)
        g.emit(ind, f"{dst} = {tmp}")
        return
    compact_blob = t in (CompactString, CompactNullableString, CompactBytes, CompactNullableBytes,
                         CompactRecords)
    if compact_blob or t in (String, NullableString, Bytes, NullableBytes, Records):
        is_str = t in (String, NullableString, CompactString, CompactNullableString)
        n = g.var("n")
        if compact_blob:
            _emit_uvarint(g, ind, n)
            g.emit(ind, f"{n} -= 1")
        else:
            g.emit(ind, f"{n}, = {'_h' if is_str else '_i'}(buf, pos)")
            g.emit(ind, f"pos += {2 if is_str else 4}")
        g.emit(ind, f"if {n} < 0:")
        if t.nullable:
            g.emit(ind + 1, f"if {n} != -1: raise _err('length', {n}, pos)")
            g.emit(ind + 1, f"{dst} = None")
        else:
            g.emit(ind + 1, f"raise _err('null' if {n} == -1 else 'length', {n}, pos)")
        g.emit(ind, f"elif pos + {n} > end:")
        g.emit(ind + 1, f"raise _err('short', {n}, pos)")
        if compact_blob and is_str:
            g.emit(ind, f"elif {n} > 32767:")
            g.emit(ind + 1, f"raise _err('string length', {n}, pos)")
        g.emit(ind, "else:")
        piece = f"buf[pos:pos + {n}]"
        records = t in (Records, CompactRecords)
        conv = f"_str({piece}, 'utf-8')" if is_str else (piece if records else f"bytes({piece})")
        g.emit(ind + 1, f"{dst} = {conv}")
        g.emit(ind + 1, f"pos += {n}")
        return
    if isinstance(t, Array):
        el = t.element
        n = g.var("n")
        min_size = el.min_size(v) if isinstance(el, Struct) else el.min_size
        if isinstance(t, CompactArray):
            _emit_uvarint(g, ind, n)
            g.emit(ind, f"{n} -= 1")
        else:
            g.emit(ind, f"{n}, = _i(buf, pos)")
            g.emit(ind, "pos += 4")
        g.emit(ind, f"if {n} < 0:")
        if t.nullable:
            g.emit(ind + 1, f"if {n} != -1: raise _err('array count', {n}, pos)")
            g.emit(ind + 1, f"{dst} = None")
        else:
            g.emit(ind + 1, f"raise _err('array count', {n}, pos)")
        g.emit(ind, f"elif {n} * {max(min_size, 1)} > end - pos:")
        g.emit(ind + 1, f"raise _err('count', {n}, pos, end - pos)")
        g.emit(ind, "else:")
        if getattr(el, "fmt", None) is not None:  # numbers: one unpack for the whole array
            g.emit(ind + 1, f"{dst} = list(_unpack('>%d{el.fmt}' % {n}, buf, pos))")
            g.emit(ind + 1, f"pos += {n} * {el.size}")
            return
        lst, item = g.var("l"), g.var("e")
        g.emit(ind + 1, f"{lst} = []")
        g.emit(ind + 1, f"for _ in range({n}):")
        if isinstance(el, Struct):
            _emit_decode_struct(g, el, v, item, ind + 2)
        else:
            _emit_decode_value(g, el, v, item, ind + 2)
        g.emit(ind + 2, f"{lst}.append({item})")
        g.emit(ind + 1, f"{dst} = {lst}")
        return
    dec = g.const(t.decode, "_t")  # any other type: its own bounds-checked decoder
    g.emit(ind, f"{dst}, pos = {dec}(buf, pos)")


def _gen_decoder(s: Struct, v: int, nested: bool = False) -> Any:
    g = _Gen()
    g.ns.update({"_new": object.__new__, "_h": struct.Struct(">h").unpack_from,
                 "_i": struct.Struct(">i").unpack_from, "_unpack": struct.unpack_from,
                 "_str": str, "_err": _decode_error, "_uv": uvarint_at})
    g.emit(0, "def _dec(buf, pos):")
    g.emit(1, "end = len(buf)")
    _emit_decode_struct(g, s, v, "obj", 1)
    g.emit(1, "return obj, pos")
    return g.build("_dec", f"decode {s.name} v{v}{' (tagged)' if nested else ''}")


def _emit_encode_struct(g: _Gen, s: Struct, v: int, src: str, ind: int) -> None:
    """Emit code writing the struct held in variable ``src`` (our object, a dict, or any
    object with the attributes) to ``out``."""
    flex = s.flexible(v)
    present = [f for f in s.fields if f.in_version(v)]
    if not present:
        if flex:
            g.emit(ind, "out += b'\\x00'")
        return
    names = {f.name: g.var("x") for f in present}
    cls = g.const(s.data_class, "_C")
    g.emit(ind, f"if {src}.__class__ is {cls}:")
    for f in present:
        g.emit(ind + 1, f"{names[f.name]} = {src}.{f.name}")
    g.emit(ind, f"elif {src}.__class__ is dict:")
    # a misspelled key would otherwise send its field's default without a word: refuse it
    known = g.const(frozenset(f.name for f in s.fields), "_known")
    g.emit(ind + 1, f"if not {src}.keys() <= {known}:")
    g.emit(ind + 2, f"raise _unknown_keys({s.name!r}, {v}, {src}, {known})")
    defaults = {f.name: g.const(f.default, "_d") for f in present}
    for f in present:
        g.emit(ind + 1, f"{names[f.name]} = {src}.get({f.name!r}, {defaults[f.name]})")
    g.emit(ind, f"elif {src} is None:")
    g.emit(ind + 1, f"raise _enc_error('{s.name} v{v}: None where a struct is required')")
    g.emit(ind, "else:")
    for f in present:
        g.emit(ind + 1, f"{names[f.name]} = getattr({src}, {f.name!r}, {defaults[f.name]})")
    run: list[str] = []
    fmts: list[str] = []

    def flush() -> None:
        if run:
            p = g.const(struct.Struct(">" + "".join(fmts)).pack, "_p")
            g.emit(ind, f"out += {p}({', '.join(run)})")
            run.clear()
            fmts.clear()

    tagged = [f for f in present if flex and f.tag is not None]
    for f in present:
        if flex and f.tag is not None:
            continue
        x = names[f.name]
        t = f.type_for(v, flex)
        if getattr(t, "fmt", None) is not None:
            run.append(x)
            fmts.append(t.fmt)
            continue
        flush()
        _emit_encode_value(g, t, v, x, ind, f"{s.name}.{f.name}")
    flush()
    if flex:
        _emit_encode_tagged(g, s, v, tagged, names, defaults, ind)


def _emit_encode_tagged(g: _Gen, s: Struct, v: int, tagged: list[Field], names: dict[str, str],
                        defaults: dict[str, str], ind: int) -> None:
    """The tagged-field section: each tagged field whose value is not its default, in tag
    order, as tag, size, data."""
    if not tagged:
        g.emit(ind, "out += b'\\x00'")
        return
    checks = {}
    for f in tagged:
        x = names[f.name]
        if isinstance(f.type_for(v, True), Array) and not f.default:
            checks[f.name] = x  # an empty list is the default too
        elif f.default is None:
            checks[f.name] = f"{x} is not None"
        else:
            checks[f.name] = f"({x} is not None and {x} != {defaults[f.name]})"
    # the usual case, every tagged field at its default: one byte, nothing built
    g.emit(ind, f"if not ({' or '.join(checks.values())}):")
    g.emit(ind + 1, "out += b'\\x00'")
    g.emit(ind, "else:")
    ind += 1
    lst = g.var("tl")
    g.emit(ind, f"{lst} = []")
    for f in sorted(tagged, key=lambda f: f.tag):
        x = names[f.name]
        t = f.type_for(v, True)
        g.emit(ind, f"if {checks[f.name]}:")
        tb = g.var("tb")
        g.emit(ind + 1, f"{tb} = bytearray()")
        if isinstance(t, Struct):
            enc = g.const(_gen_encoder(t, v, nested=True), "_te")
            g.emit(ind + 1, f"{enc}({x}, {tb}, None)")
        else:
            w = g.const(t.write, "_tw")
            g.emit(ind + 1, f"{w}({x}, {tb})")
        g.emit(ind + 1, f"{lst}.append(({f.tag}, {tb}))")
    g.emit(ind, f"out += _uvb(len({lst}))")
    tag, data = g.var("tg"), g.var("td")
    g.emit(ind, f"for {tag}, {data} in {lst}:")
    g.emit(ind + 1, f"out += _uvb({tag})")
    g.emit(ind + 1, f"out += _uvb(len({data}))")
    g.emit(ind + 1, f"out += {data}")


def _emit_encode_value(g: _Gen, t: Any, v: int, x: str, ind: int, label: str) -> None:
    from appliance.protocol.types import CompactRecords, Records

    if t is Records:
        g.emit(ind, f"_records({x}, out, parts)")
    elif t is CompactRecords:
        g.emit(ind, f"_crecords({x}, out, parts)")
    elif isinstance(t, Struct):
        _emit_encode_struct(g, t, v, x, ind)
    elif isinstance(t, Array) and isinstance(t.element, Struct):
        comp = isinstance(t, CompactArray)
        g.emit(ind, f"if {x} is None:")
        g.emit(ind + 1, ("out += b'\\x00'" if comp else "out += _NULL32") if t.nullable
               else f"raise _enc_error('{label}: None in a non-nullable array')")
        g.emit(ind, "else:")
        g.emit(ind + 1, f"out += _uvb(len({x}) + 1)" if comp else f"out += _pack_i32(len({x}))")
        e = g.var("e")
        g.emit(ind + 1, f"for {e} in {x}:")
        _emit_encode_struct(g, t.element, v, e, ind + 2)
        if not any(f.in_version(v) for f in t.element.fields) and not t.element.flexible(v):
            g.emit(ind + 2, "pass")
    else:
        w = g.const(t.write, "_w")
        g.emit(ind, f"{w}({x}, out)")


def _unknown_keys(struct_name: str, v: int, d: dict, known: frozenset) -> ProtocolEncodeError:
    unknown = ", ".join(sorted(repr(k) for k in d.keys() - known))
    return ProtocolEncodeError(f"{struct_name} v{v}: unknown field(s) {unknown}")


def _gen_encoder(s: Struct, v: int, nested: bool = False) -> Any:
    g = _Gen()
    g.ns.update({"_pack_i32": _pack_i32, "_NULL32": _NULL32, "_records": write_records,
                 "_crecords": write_compact_records, "_uvb": encode_uvarint,
                 "_enc_error": ProtocolEncodeError, "_unknown_keys": _unknown_keys})
    g.emit(0, "def _enc(v, out, parts):")
    _emit_encode_struct(g, s, v, "v", 1)
    g.emit(1, "return None")
    return g.build("_enc", f"encode {s.name} v{v}{' (tagged)' if nested else ''}")


# --- API messages -----------------------------------------------------------------------------

class ApiMessage:
    """Base for one Kafka API: declare API_KEY, MIN_VERSION, MAX_VERSION (the range we
    advertise), FLEXIBLE (Kafka's flexibleVersions, e.g. "9+"; None = none), REQUEST and
    RESPONSE field tuples. Subclassing checks both and builds the generated value classes,
    ``cls.Request`` and ``cls.Response``; each version's codecs compile on first use.

    In flexible versions the same declarations encode compactly with tagged-field sections,
    and the frames use request header v2 / response header v1 (``FLEXIBLE_RESPONSE_HEADER``
    False keeps header v0: ApiVersions, KIP-511)."""

    API_KEY: ClassVar[int]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FLEXIBLE: ClassVar[str | None] = None
    FLEXIBLE_RESPONSE_HEADER: ClassVar[bool] = True
    FLEX_LO: ClassVar[int] = _MAX_VERSION + 1  # the first flexible version (derived)
    REQUEST: ClassVar[tuple[Field, ...]] = ()
    RESPONSE: ClassVar[tuple[Field, ...]] = ()
    Request: ClassVar[type[Data]]
    Response: ClassVar[type[Data]]
    _request_struct: ClassVar[Struct]
    _response_struct: ClassVar[Struct]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        lo, hi = cls.MIN_VERSION, cls.MAX_VERSION
        if not 0 <= lo <= hi <= _MAX_VERSION:
            raise SchemaError(f"{cls.__name__}: bad version range {lo}-{hi}")
        if cls.FLEXIBLE is not None:
            flex_lo, flex_hi = parse_versions(cls.FLEXIBLE)
            if flex_hi != _MAX_VERSION:
                raise SchemaError(f"{cls.__name__}: flexible versions must be open-ended ('N+')")
            cls.FLEX_LO = flex_lo
        cls._request_struct = Struct(*cls.REQUEST)
        cls._request_struct._compile(f"{cls.__name__}.Request", lo, hi, flex_lo=cls.FLEX_LO)
        cls._response_struct = Struct(*cls.RESPONSE)
        cls._response_struct._compile(f"{cls.__name__}.Response", lo, hi, flex_lo=cls.FLEX_LO)
        cls.Request = cls._request_struct.data_class
        cls.Response = cls._response_struct.data_class

    @classmethod
    def compile_codecs(cls) -> None:
        """Compile now every codec first use would (every version, request and response).
        The schema tests call it for every message, so a declaration that cannot compile
        fails the suite; a process that wants no first-use latency may call it too."""
        for s in (cls._request_struct, cls._response_struct):
            for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
                s.decoder(v)
                s.encoder(v)

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """Whether ``version`` uses the flexible encodings and request header v2."""
        return version >= cls.FLEX_LO

    @classmethod
    def response_header_flexible(cls, version: int) -> bool:
        """Whether the response header of ``version`` is v1 (with a tagged-field section)."""
        return version >= cls.FLEX_LO and cls.FLEXIBLE_RESPONSE_HEADER

    @classmethod
    def _check_version(cls, version: int) -> None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise UnsupportedVersionError(
                f"{cls.__name__} v{version} not supported (we support {cls.MIN_VERSION}-{cls.MAX_VERSION})")

    @classmethod
    def _decode(cls, s: Struct, what: str, version: int, data: Any, pos: int, whole: bool) -> Any:
        cls._check_version(version)
        buf = data if isinstance(data, memoryview) else memoryview(data)
        dec = s._decoders[version]  # outside the try: a codec that cannot compile is no decode error
        try:
            value, end = dec(buf, pos)
        except (struct.error, IndexError):  # IndexError: a varint read past the end
            raise truncated(f"{cls.__name__} {what} v{version}", pos) from None
        except UnicodeDecodeError as e:
            raise ProtocolDecodeError(
                f"{cls.__name__} {what} v{version}: invalid UTF-8 in a string: {e.reason}") from None
        if whole and end != len(buf):
            raise ProtocolDecodeError(
                f"{cls.__name__} {what} v{version}: {len(buf) - end} unexpected trailing bytes")
        return value, end

    @classmethod
    def decode_request(cls, version: int, data: bytes | bytearray | memoryview, pos: int = 0,
                       trailing_ok: bool = False) -> Any:
        """Decode a request body that fills ``data[pos:]`` exactly (or, with ``trailing_ok``,
        starts there: Kafka's parser ignores bytes after the body, and librdkafka 2.x sends
        some after a flexible Metadata request). Records fields are memoryview slices of
        ``data`` (keep ``data`` immutable while they live).

        Raises UnsupportedVersionError for a version outside our range, ProtocolDecodeError
        for malformed bytes (including trailing bytes unless ``trailing_ok``)."""
        return cls._decode(cls._request_struct, "request", version, data, pos, not trailing_ok)[0]

    @classmethod
    def decode_response(cls, version: int, data: bytes | bytearray | memoryview, pos: int = 0) -> Any:
        """Decode a response body that fills ``data[pos:]`` exactly (errors as decode_request)."""
        return cls._decode(cls._response_struct, "response", version, data, pos, True)[0]

    @classmethod
    def _write(cls, s: Struct, what: str, version: int, body: Any, out: bytearray, parts: list) -> None:
        cls._check_version(version)
        enc = s._encoders[version]
        try:
            enc(body, out, parts)
        except (struct.error, TypeError) as e:
            raise ProtocolEncodeError(f"{cls.__name__} {what} v{version}: {e}") from None

    @classmethod
    def write_request(cls, version: int, body: Any, out: bytearray, parts: list) -> None:
        """Append the encoded request body to ``out``; large Records values / FileSlices are
        flushed into ``parts`` (see types.write_records). Raises ProtocolEncodeError,
        UnsupportedVersionError."""
        cls._write(cls._request_struct, "request", version, body, out, parts)

    @classmethod
    def write_response(cls, version: int, body: Any, out: bytearray, parts: list) -> None:
        """As write_request, for the response body."""
        cls._write(cls._response_struct, "response", version, body, out, parts)

    @classmethod
    def encode_request(cls, version: int, body: Any) -> bytes:
        """The request body as bytes (no header, no size). Raises ProtocolEncodeError (also for
        a FileSlice value), UnsupportedVersionError."""
        return cls._join(cls.write_request, version, body)

    @classmethod
    def encode_response(cls, version: int, body: Any) -> bytes:
        """The response body as bytes (no header, no size); errors as encode_request."""
        return cls._join(cls.write_response, version, body)

    @staticmethod
    def _join(writer: Any, version: int, body: Any) -> bytes:
        out = bytearray()
        parts: list = []
        writer(version, body, out, parts)
        if not parts:
            return bytes(out)
        if any(not isinstance(p, bytes | bytearray | memoryview) for p in parts):
            raise ProtocolEncodeError("a FileSlice cannot be encoded to bytes; use the frame encoder")
        return b"".join([*parts, out])
