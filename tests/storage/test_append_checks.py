"""append_checks: header reading without validation, and the compacted-topic key rule."""

from __future__ import annotations

import pytest

from appliance.errors import CorruptRecordError, InvalidRecordError
from appliance.storage.append_checks import headers_unvalidated, require_keys
from tests.storage.conftest import batch


def test_headers_by_name():
    data = batch(n=3, base_offset=7) + batch(n=2, base_offset=10)
    heads = headers_unvalidated(memoryview(data))
    assert [(h.base_offset, h.records_count, h.last_offset_delta) for h in heads] == [(7, 3, 2), (10, 2, 1)]
    assert sum(h.batch_length + 12 for h in heads) == len(data)


@pytest.mark.parametrize("cut, err, msg", [
    (0, InvalidRecordError, "empty"),
    (30, CorruptRecordError, "truncated"),
    (100, CorruptRecordError, "does not fit"),
])
def test_bad_headers(cut, err, msg):
    data = batch(n=3)
    with pytest.raises(err, match=msg):
        headers_unvalidated(memoryview(data[:cut]))


def test_bad_magic():
    data = bytearray(batch(n=1))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        headers_unvalidated(memoryview(data))


def test_require_keys():
    good = batch(n=2, key=b"k")
    require_keys(memoryview(good), headers_unvalidated(memoryview(good)))
    bad = good + batch(n=1, key=None)
    with pytest.raises(InvalidRecordError, match="without key"):
        require_keys(memoryview(bad), headers_unvalidated(memoryview(bad)))
