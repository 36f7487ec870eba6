"""The sink's producer is idempotent: a Produce whose answer is lost is resent and written once."""

from __future__ import annotations

import pytest

from appliance.client.connection import ConnectionFailed
from spark.producer import Producer
from tests.spark.conftest import create_topic, kcat


def _lose_first_answers(producer: Producer, n: int) -> None:
    """The broker gets the next ``n`` Produce requests, their answers are lost (the connection
    drops after the request was sent), as when a network blip hits a task."""
    left = [n]
    real = producer._conn

    def conn(node):
        c = real(node)
        if getattr(c, "_lossy", False):
            return c
        send = c.request

        def request(api_key, body, *a, **kw):
            resp = send(api_key, body, *a, **kw)
            if api_key == 0 and left[0] > 0:
                left[0] -= 1
                raise ConnectionFailed(f"answer from {c.address} lost (test)")
            return resp

        c.request = request
        c._lossy = True
        return c

    producer._conn = conn


@pytest.mark.parametrize("idempotent", [True, False])
def test_retried_produce_is_written_once(broker, idempotent):
    topic = f"idem-{idempotent}".lower()
    create_topic(broker, topic, 2)
    p = Producer(broker.bootstrap, batch_records=50, idempotent=idempotent)
    _lose_first_answers(p, 2)
    try:
        for i in range(200):
            p.send(topic, b"k%d" % (i % 7), b"v%d" % i)
        p.flush()
    finally:
        p.close()
    assert p.retried >= 2
    values = sorted(v for *_, v, _ in kcat(broker, topic))
    if idempotent:
        assert values == sorted(f"v{i}" for i in range(200))
    else:  # the contrast: without sequence numbers the resent batches are written twice
        assert len(values) > 200 and set(values) == {f"v{i}" for i in range(200)}
