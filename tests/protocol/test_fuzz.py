"""Bounded, seeded fuzzing: garbage and mutated messages produce only our specific errors,
never a crash, a hang or a giant allocation."""

from __future__ import annotations

import random
import struct
import time
import tracemalloc

from appliance.protocol import types as T
from appliance.protocol.connection import NEED_DATA, PEER_CLOSED, ClientConnection, ServerConnection
from appliance.protocol.errors import ProtocolDecodeError, RemoteProtocolError
from appliance.protocol.frames import encode_request_frame
from appliance.protocol.schema import Struct
from tests.protocol.schema_values import walk_versions


def random_value(t, v, rng: random.Random, depth=0):
    """A deterministic random value for a schema type (dict form)."""
    if isinstance(t, Struct):
        return {f.name: random_value(f.type_for(v), v, rng, depth + 1) for f in t.fields if f.in_version(v)}
    if isinstance(t, T.Array):
        if t.nullable and rng.random() < 0.2:
            return None
        return [random_value(t.element, v, rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if t is T.Uuid:
        return rng.randbytes(16)
    if t.fmt is not None:
        if t is T.Boolean:
            return rng.random() < 0.5
        bits = t.size * 8
        return rng.randint(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if t.nullable and rng.random() < 0.2:
        return None
    if t in (T.String, T.NullableString):
        return "".join(rng.choice("abcé€x") for _ in range(rng.randint(0, 6)))
    return rng.randbytes(rng.randint(0, 20))


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        if op == 5:  # plant a long or overflowing unsigned varint (compact lengths/counts)
            i = rng.randint(0, len(b))
            b[i:i] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01", b"\x80"])
        elif op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1:
            b.insert(rng.randint(0, len(b)), rng.randrange(256))
        elif op == 2 and b:
            del b[rng.randrange(len(b))]
        elif op == 3:
            del b[rng.randint(0, len(b)):]
        elif op == 4 and len(b) >= 4:  # plant a hostile length/count
            i = rng.randrange(len(b) - 3)
            b[i:i + 4] = struct.pack(">i", rng.choice([-2, -1, 0x7FFFFFFF, 0x40000000, 0xFFFF]))
    return bytes(b)


def test_mutated_bodies_of_every_message_fail_cleanly():
    rng = random.Random(1234)
    tracemalloc.start()
    t0 = time.perf_counter()
    decoded = failed = 0
    try:
        for api, kind, v in walk_versions():
            s = api._request_struct if kind == "request" else api._response_struct
            enc = api.encode_request if kind == "request" else api.encode_response
            dec = api.decode_request if kind == "request" else api.decode_response
            for _ in range(40):
                wire = enc(v, random_value(s, v, rng))
                try:
                    dec(v, mutate(wire, rng))
                    decoded += 1
                except ProtocolDecodeError:
                    failed += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert failed > 1000 and decoded > 100  # both outcomes are exercised
    assert peak < 16 << 20, f"peak allocation {peak} bytes"
    assert time.perf_counter() - t0 < 20


def test_garbage_streams_into_the_server():
    rng = random.Random(99)
    valid = encode_request_frame(12, 1, 5, "c", {"group_id": "g", "generation_id": 1, "member_id": "m"})
    outcomes = {"error": 0, "events": 0, "need": 0}
    tracemalloc.start()
    try:
        for i in range(1500):
            conn = ServerConnection(max_request_size=1 << 20)
            if i % 3 == 0:
                stream = rng.randbytes(rng.randint(0, 64))
            elif i % 3 == 1:  # a plausible size prefix, then garbage
                n = rng.randint(1, 40)
                stream = struct.pack(">i", n) + rng.randbytes(max(0, n + rng.randint(-3, 10)))
            else:
                stream = mutate(valid * 2, rng)
            pos = 0
            try:
                while pos < len(stream):
                    step = rng.randint(1, 16)
                    conn.receive_data(stream[pos:pos + step])
                    pos += step
                    for _ in range(100):  # a single chunk never yields more than a few events
                        ev = conn.next_event()
                        if ev is NEED_DATA or ev is PEER_CLOSED:
                            break
                        outcomes["events"] += 1
                        if getattr(ev, "close_connection", False):
                            raise RemoteProtocolError("closed by event")
                    else:
                        raise AssertionError("next_event never returned NEED_DATA")
                outcomes["need"] += 1
            except RemoteProtocolError:
                outcomes["error"] += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(outcomes.values()), outcomes
    assert peak < 16 << 20, f"peak allocation {peak} bytes"


def test_garbage_responses_into_the_client():
    rng = random.Random(7)
    for i in range(500):
        client = ClientConnection()
        api, _, v = rng.choice([w for w in walk_versions() if w[1] == "response"])
        client.send_request(api.API_KEY, v, random_value(api._request_struct, v, rng))
        body = api.encode_response(v, random_value(api._response_struct, v, rng))
        frame = struct.pack(">ii", 4 + len(body), 0) + body
        client.receive_data(mutate(frame, rng) if i % 2 else frame)
        try:
            ev = client.next_event()
            assert ev in (NEED_DATA, PEER_CLOSED) or ev.correlation_id == 0, ev
        except RemoteProtocolError:
            pass
