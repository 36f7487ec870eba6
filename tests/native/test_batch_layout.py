"""The one header layout declaration and the names the storage code reads headers by."""

from __future__ import annotations

from appliance.records.batch import BatchHeader, read_header
from native.batch_layout import FIELD_OFFSETS, HEADER_FIELDS, HEADER_STRUCT
from tests.storage.conftest import batch


def test_batch_header_fields_are_the_layout_declaration():
    assert BatchHeader._fields == tuple(name for name, _ in HEADER_FIELDS)
    assert list(FIELD_OFFSETS) == list(BatchHeader._fields)


def test_read_header_by_name_matches_the_struct():
    data = batch(n=4, base_offset=17, ts=1234)
    h = read_header(data)
    raw = HEADER_STRUCT.unpack_from(data)
    assert tuple(h) == raw
    assert (h.base_offset, h.records_count, h.last_offset_delta, h.base_timestamp) == (17, 4, 3, 1234)
    assert h.batch_length + 12 == len(data)
