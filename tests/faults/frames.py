"""A seeded generator of hostile request frames: valid frames built from our own protocol
declarations for every API and version the broker advertises, then mutated (body bytes, size
prefixes, hostile lengths) and, for Produce, record batches with wrong CRCs, lengths and varints.

The values come from the schemas (tests/protocol/test_fuzz.py's random_value and mutate); this
module adds the framing, the record batches and the aim at real topics, so the frames reach the
broker's handlers and disk workers instead of dying in the decoder."""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Iterator, Sequence

from appliance.protocol.frames import (
    REQUEST_HEADER,
    SIZE,
    encode_request_frame,
    parse_request_header,
)
from appliance.protocol.registry import API_BY_KEY
from appliance.protocol.schema import Struct
from appliance.protocol.types import write_nullable_string
from appliance.records import batch_layout as L
from appliance.records.batch import build_batch
from native import crc32c
from tests.protocol.test_fuzz import mutate, random_value

__all__ = ["FrameFuzzer", "corrupt_batch", "valid_batch"]

# APIs whose valid form may name a real topic without changing what is already written: the
# fuzzer never aims DeleteTopics, DeleteRecords, CreatePartitions or AlterConfigs at them.
_AIMABLE = {0, 1, 2, 3, 9, 32}


def valid_batch(rng: random.Random) -> bytes:
    """One well-formed RecordBatch v2 (1-5 small records, maybe idempotent-looking)."""
    recs = [(rng.randbytes(rng.randint(0, 8)) if rng.random() < 0.7 else None,
             rng.randbytes(rng.randint(0, 64))) for _ in range(rng.randint(1, 5))]
    pid = rng.choice([-1, -1, rng.randint(0, 1 << 20)])
    return build_batch(recs, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=rng.randint(0, 100) if pid >= 0 else -1)


def _restamp_crc(b: bytearray) -> None:
    """Recompute the CRC32C so a later corruption is caught only by the deeper checks."""
    struct.pack_into(">I", b, L.CRC_OFFSET, crc32c(bytes(b[L.ATTRIBUTES_OFFSET:])))


def corrupt_batch(data: bytes, rng: random.Random) -> bytes:
    """A record batch broken in one of the ways a buggy or hostile client breaks it."""
    b = bytearray(data)
    kind = rng.randrange(8)
    if kind == 0:  # wrong CRC
        struct.pack_into(">I", b, L.CRC_OFFSET, rng.getrandbits(32))
    elif kind == 1:  # batch length too long / short / negative
        struct.pack_into(">i", b, L.BATCH_LENGTH_OFFSET,
                         rng.choice([-1, 0, 1, len(b), len(b) * 2, 0x7FFFFFFF, len(b) - 13]))
    elif kind == 2:  # record count lies (CRC made right so the walk sees it)
        struct.pack_into(">i", b, L.RECORDS_COUNT_OFFSET, rng.choice([-1, 0, 2, 1000, 0x7FFFFFFF]))
        _restamp_crc(b)
    elif kind == 3:  # a record's length varint: overlong, negative or huge (CRC made right)
        pos = L.HEADER_SIZE
        b[pos:pos + 1] = rng.choice([b"\xff\xff\xff\xff\xff\xff", b"\x01", b"\xfe\xff\xff\xff\x0f",
                                     b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"])
        _restamp_crc(b)
    elif kind == 4:  # garbage inside the records, CRC right
        for _ in range(rng.randint(1, 6)):
            if len(b) > L.HEADER_SIZE:
                b[rng.randrange(L.HEADER_SIZE, len(b))] = rng.randrange(256)
        _restamp_crc(b)
    elif kind == 5:  # magic 0/1/3 or compression codec 5-7, CRC right
        if rng.random() < 0.5:
            b[L.MAGIC_OFFSET] = rng.choice([0, 1, 3, 255])
        else:
            b[L.ATTRIBUTES_OFFSET + 1] = (b[L.ATTRIBUTES_OFFSET + 1] & ~7) | rng.randint(1, 7)
            _restamp_crc(b)
    elif kind == 6:  # truncated batch
        del b[rng.randint(0, len(b) - 1):]
    else:  # last offset delta / sequence lies, CRC right
        struct.pack_into(">i", b, L.LAST_OFFSET_DELTA_OFFSET, rng.choice([-1, 0, 99, 0x7FFFFFFF]))
        _restamp_crc(b)
    return bytes(b)


def _records(rng: random.Random) -> bytes:
    n = rng.randint(1, 3)
    batches = [valid_batch(rng) for _ in range(n)]
    i = rng.randrange(n)
    batches[i] = corrupt_batch(batches[i], rng)
    return b"".join(batches)


def _aim(api_key: int, body: dict, topics: Sequence[tuple[str, int]], rng: random.Random) -> None:
    """Point some of the body's topic names and partitions at real ones."""
    if api_key not in _AIMABLE or not topics:
        return
    for key in ("topic_data", "topics"):
        arr = body.get(key)
        if not arr:
            continue
        for t in arr:
            name, parts = rng.choice(topics)
            for nk in ("name", "topic"):
                if nk in t:
                    t[nk] = name
            for pk in ("partition_data", "partitions"):
                for p in t.get(pk) or []:
                    if not isinstance(p, dict):
                        continue
                    for ik in ("index", "partition", "partition_index"):
                        if ik in p:
                            p[ik] = rng.randrange(parts)


def _tame(api_key: int, body: dict, rng: random.Random) -> None:
    """Keep the valid frames reachable: mostly short waits and small answers (a fetch that waits
    2^31 ms only ties up its own connection, and a few of them still go through)."""
    if api_key == 1 and rng.random() < 0.9:
        body["max_wait_ms"] = rng.choice([0, 0, 10, 100])
    if api_key == 0 and body.get("topic_data"):
        if rng.random() < 0.8:
            body["timeout_ms"] = rng.choice([0, 100, 1000])
        for t in body["topic_data"]:
            for p in t.get("partition_data") or []:
                r = rng.random()
                p["records"] = _records(rng) if r < 0.7 else valid_batch(rng) if r < 0.9 else p["records"]
    if api_key == 19:  # CreateTopics: a few small valid ones among the hostile counts
        for t in body.get("topics") or []:
            if rng.random() < 0.5:
                t["num_partitions"] = rng.choice([-1, 0, 1, 2])
                t["replication_factor"] = rng.choice([-1, 1, 2])


def _header_bytes(api_key: int, version: int, corr: int, client_id: str | None) -> bytes:
    out = bytearray(REQUEST_HEADER.pack(api_key, version, corr))
    write_nullable_string(client_id, out)
    return bytes(out)


class FrameFuzzer:
    """Seeded frames for the advertised (api_key, min, max) triples. ``kinds`` counts what was
    made: valid, body (mutated body, size right), raw (mutated whole frame), header (bad api
    key/version), batch (Produce with a corrupt record batch and an otherwise valid frame)."""

    def __init__(self, seed: int, advertised: Sequence[tuple[int, int, int]],
                 topics: Sequence[tuple[str, int]] = ()) -> None:
        self.rng = random.Random(seed)
        self.versions = [(k, v) for k, lo, hi in advertised if k in API_BY_KEY
                         for v in range(lo, hi + 1)]
        self.topics = list(topics)
        self.kinds: Counter[str] = Counter()
        self.apis: Counter[int] = Counter()
        self.corr = 0

    def _valid(self, api_key: int, v: int) -> bytes:
        api = API_BY_KEY[api_key]
        s: Struct = api._request_struct
        body = random_value(s, v, self.rng)
        _aim(api_key, body, self.topics, self.rng)
        _tame(api_key, body, self.rng)
        self.corr = (self.corr + 1) & 0x7FFFFFFF
        return encode_request_frame(api_key, v, self.corr, self.rng.choice(["fuzz", None, "é" * 3]), body)

    def frame(self) -> bytes:
        rng = self.rng
        api_key, v = rng.choice(self.versions)
        self.apis[api_key] += 1
        frame = self._valid(api_key, v)
        r = rng.random()
        if r < 0.25 or (api_key == 0 and r < 0.45):
            self.kinds["batch" if api_key == 0 else "valid"] += 1
            return frame
        if r < 0.80:  # mutate the body, keep the size prefix honest
            self.kinds["body"] += 1
            payload = mutate(frame[SIZE.size:], rng)
            return SIZE.pack(len(payload)) + payload
        if r < 0.90:  # anything goes, size prefix included
            self.kinds["raw"] += 1
            return mutate(frame, rng)
        self.kinds["header"] += 1  # unknown api key / version, or a body of another version
        body = frame[SIZE.size + parse_request_header(frame[SIZE.size:])[4]:]
        hk = rng.choice([api_key, rng.randint(-5, 80), rng.randint(-32768, 32767)])
        hv = rng.choice([v + 1, v - 1, -1, 32767, rng.randint(0, 12)])
        payload = _header_bytes(hk, hv, 1, rng.choice(["fuzz", None])) + body
        return SIZE.pack(len(payload)) + payload

    def frames(self, n: int) -> Iterator[bytes]:
        for _ in range(n):
            yield self.frame()
