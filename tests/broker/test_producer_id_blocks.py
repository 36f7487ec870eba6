"""A standalone broker's producer ids (InitProducerId): distinct across its network workers and
across block boundaries, never reused after a restart or a SIGKILL, and a retriable error,
not a hang, while no block can be recorded."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from appliance.errors import ErrorCode
from appliance.storage.producer_id_block_file import BLOCK_FILE
from tests.broker.clients import create_topic
from tests.broker.producer_ids import ids_of, ids_on_every_worker, init_producer_ids
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess


def recorded_block(broker: BrokerProcess) -> dict:
    return json.loads((Path(broker.log_dirs[0]) / BLOCK_FILE).read_text())


def test_ids_are_distinct_across_network_workers_and_blocks(tmp_path):
    with BrokerProcess(tmp_path, overrides={"num.network.threads": "2", "broker.id": "4"}) as b:
        ids = ids_on_every_worker(b, 2, 2600)
        assert len(ids) >= 2600
        assert len(set(ids)) == len(ids) and min(ids) >= 0
        assert len({pid // 1000 for pid in ids}) >= 3  # three blocks at least, refilled under load
        block = recorded_block(b)
        assert block["version"] == 1 and block["broker"] == 4
        assert int(block["block_start"]) <= max(ids) <= int(block["block_end"])
        assert int(block["block_end"]) - int(block["block_start"]) == 999


def test_a_restarted_broker_never_hands_out_an_id_again(tmp_path):
    """After a clean stop and after a SIGKILL, the broker starts from the block after the last
    one it recorded: it skips the rest of the block it had, reuses nothing."""
    first = BrokerProcess(tmp_path)
    with first:
        with RawConnection(first.port) as c:
            before = ids_of(init_producer_ids(c, 1500))
    assert sorted(before) == list(range(1500))
    second = BrokerProcess(tmp_path, port=first.port)
    with second:
        with RawConnection(second.port) as c:
            after_stop = ids_of(init_producer_ids(c, 1200))
        # requests on a connection run at once, so ids come in any order: compare as sets
        assert sorted(after_stop) == list(range(2000, 3200))
        second.kill()  # SIGKILL supervisor and workers: block 3000-3999 is recorded, half used
    third = BrokerProcess(tmp_path, port=first.port)
    with third:
        with RawConnection(third.port) as c:
            after_kill = ids_of(init_producer_ids(c, 10))
    assert sorted(after_kill) == list(range(4000, 4010))
    assert not set(after_kill) & (set(before) | set(after_stop))


def test_no_block_to_be_had_answers_a_retriable_error_then_ids_again(tmp_path):
    """The block file cannot be written (here its temp file's name is taken by a directory):
    InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS at once, the broker keeps serving, and
    an idempotent confluent-kafka producer waiting meanwhile delivers once it is fixed."""
    from confluent_kafka import Producer

    blocker = tmp_path / "disk0" / (BLOCK_FILE + ".tmp")
    blocker.mkdir(parents=True)  # before the start: the broker takes its first block then
    with BrokerProcess(tmp_path) as b:
        create_topic(b.bootstrap, "pid-fault")
        with RawConnection(b.port) as c:
            started = time.monotonic()
            answers = init_producer_ids(c, 3)
            assert time.monotonic() - started < 5
            assert [code for code, _ in answers] == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 3
            assert all(pid == -1 for _, pid in answers)
            p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
            p.produce("pid-fault", b"waited")
            assert p.flush(3) == 1  # no producer id yet: the record waits, the producer retries
            # our own producer retries the retriable answer too (appliance/client/producer_id.py)
            ours: list = []
            t = threading.Thread(target=lambda: ours.append(_our_idempotent_send(b.bootstrap)))
            t.start()
            time.sleep(1.0)
            assert t.is_alive() and not ours  # still asking
            blocker.rmdir()
            assert p.flush(30) == 0
            t.join(30)
            assert len(ours) == 1 and ours[0] in (0, 1)  # our producer got an id and sent its record
            assert sorted(ids_of(init_producer_ids(c, 2))) == [2, 3]
        assert "no first producer id block yet" in b.log() and "no producer id block" in b.log()


def test_a_block_file_not_ours_is_refused_until_the_operator_decides(tmp_path):
    """Which ids went out is unknown: the broker refuses (retriable) rather than start over."""
    d = tmp_path / "disk0"
    d.mkdir()
    (d / BLOCK_FILE).write_bytes(b"")
    with BrokerProcess(tmp_path) as b:
        with RawConnection(b.port) as c:
            assert init_producer_ids(c, 1) == [(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)]
            (d / BLOCK_FILE).write_bytes(b"{not json")
            assert init_producer_ids(c, 1) == [(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)]
            (d / BLOCK_FILE).write_bytes(b'{"version":1,"broker":0,"block_start":"7000","block_end":"7999"}')
            assert ids_of(init_producer_ids(c, 1)) == [8000]


def _our_idempotent_send(bootstrap: str) -> int:
    from appliance.client import Producer

    with Producer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all") as p:
        return p.send("pid-fault", b"ours").result(30).offset
