"""The transaction marker sender (broker/disk/txn_markers.py) against a leader of our own making:
a socket server speaking the Kafka protocol (ApiVersions, Metadata, WriteTxnMarkers), because no
broker serves WriteTxnMarkers until the partition leader's side is merged (branch txn-log).
The leader answers each marker as the test scripts it: the sender retries what is retriable,
re-reads the leaders each pass, drops the partitions of deleted topics, and reports the job
done (waking the loop) only when every partition has its marker."""

from __future__ import annotations

import socket
import struct
import threading
import time

from appliance.broker.disk.txn_markers import MarkerSender
from appliance.coordinator.txn_coordinator import MarkerJob
from appliance.protocol.frames import (
    parse_request_header,
    response_header,
    skip_request_header_tags,
)
from appliance.protocol.messages import ApiVersions, Metadata
from appliance.protocol.messages.transactions import WriteTxnMarkers

_SIZE = struct.Struct(">i")
NOT_LEADER, UNKNOWN, CORRUPT = 6, 3, 2


class FakeLeader:
    """Leads every partition of topic "t" (and of "u"); "gone" does not exist. ``script`` maps
    (topic, partition) to the error codes to answer in turn (then NONE)."""

    def __init__(self, serves_markers: bool = True) -> None:
        self.serves_markers = serves_markers
        self.script: dict[tuple[str, int], list[int]] = {}
        self.markers: list[dict] = []  # every marker received
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.leader_port = self.port  # the leader its Metadata names (another FakeLeader's port)
        self.topic_ports: dict[str, int] = {}  # a topic led elsewhere: its leader's port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            while True:
                head = _read(sock, 4)
                if head is None:
                    return
                frame = memoryview(_read(sock, _SIZE.unpack(head)[0]))
                api_key, version, corr, _, pos = parse_request_header(frame)
                api = WriteTxnMarkers if api_key == 27 else {18: ApiVersions, 3: Metadata}[api_key]
                if api.is_flexible(version):
                    pos = skip_request_header_tags(frame, pos)
                body = api.decode_request(version, bytes(frame[pos:]))
                answer = getattr(self, f"_api_{api_key}")(body)
                out = response_header(api, version, corr) + api.encode_response(version, answer)
                sock.sendall(_SIZE.pack(len(out)) + out)

    def _api_18(self, body) -> dict:
        keys = [{"api_key": 18, "min_version": 0, "max_version": 2}, {"api_key": 3, "min_version": 1, "max_version": 1}]
        if self.serves_markers:
            keys.append({"api_key": 27, "min_version": 0, "max_version": 1})
        return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}

    def _api_3(self, body) -> dict:
        topics = []
        for t in body.topics:
            if t.name == "gone":
                topics.append({"error_code": UNKNOWN, "name": t.name, "is_internal": False, "partitions": []})
            else:
                node = 1 if t.name in self.topic_ports else 0
                topics.append({"error_code": 0, "name": t.name, "is_internal": False, "partitions": [
                    {"error_code": 0, "partition_index": p, "leader_id": node, "replica_nodes": [node],
                     "isr_nodes": [node]} for p in range(2)]})
        brokers = [{"node_id": 0, "host": "127.0.0.1", "port": self.leader_port, "rack": None}]
        brokers += [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": None}
                    for port in set(self.topic_ports.values())]
        return {"brokers": brokers, "controller_id": 0, "topics": topics}

    def _api_27(self, body) -> dict:
        out = []
        for m in body.markers:
            self.markers.append({"pid": m.producer_id, "epoch": m.producer_epoch, "commit": m.transaction_result,
                                 "coordinator_epoch": m.coordinator_epoch,
                                 "partitions": [(t.name, p) for t in m.topics for p in t.partition_indexes]})
            out.append({"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [
                    {"partition_index": p, "error_code": (self.script.get((t.name, p)) or [0]).pop(0)}
                    for p in t.partition_indexes]} for t in m.topics]})
        return {"markers": out}

    def close(self) -> None:
        self.server.close()


def _read(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _wait_done(sender: MarkerSender, timeout: float = 10.0) -> MarkerJob | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return sender.done.get(timeout=0.05)
        except Exception:
            continue
    return None


JOB = MarkerJob("tx", 77, 3, True, (("t", 0), ("t", 1), ("gone", 0)), coordinator_epoch=5)


def test_markers_retried_until_every_partition_answers():
    leader = FakeLeader()
    leader.script = {("t", 1): [NOT_LEADER, NOT_LEADER], ("t", 0): [CORRUPT]}
    wakes = []
    sender = MarkerSender(("127.0.0.1", leader.port), lambda: wakes.append(1))
    try:
        sender.submit(JOB)
        assert _wait_done(sender) == JOB
        assert wakes
        # the deleted topic's partition was dropped, never sent; the others until answered
        sent = [tp for m in leader.markers for tp in m["partitions"]]
        assert ("gone", 0) not in sent
        assert sent.count(("t", 1)) == 3 and sent.count(("t", 0)) == 2
        assert {(m["pid"], m["epoch"], m["commit"], m["coordinator_epoch"]) for m in leader.markers} == {(77, 3, True, 5)}
    finally:
        sender.close()
        leader.close()


def test_jobs_to_one_leader_share_requests_and_finish_separately():
    leader = FakeLeader()
    leader.script = {("u", 0): [NOT_LEADER]}
    sender = MarkerSender(("127.0.0.1", leader.port), lambda: None)
    try:
        a = MarkerJob("a", 1, 0, True, (("t", 0),), 0)
        b = MarkerJob("b", 2, 0, False, (("u", 0),), 0)
        sender.submit(a)
        sender.submit(b)
        done = {_wait_done(sender), _wait_done(sender)}
        assert done == {a, b}
        assert {(m["pid"], m["commit"]) for m in leader.markers} == {(1, True), (2, False)}
    finally:
        sender.close()
        leader.close()


def test_a_leader_without_writetxnmarkers_holds_the_job():
    leader = FakeLeader(serves_markers=False)
    sender = MarkerSender(("127.0.0.1", leader.port), lambda: None)
    try:
        sender.submit(MarkerJob("a", 1, 0, True, (("t", 0),), 0))
        assert _wait_done(sender, timeout=1.5) is None
        assert leader.markers == []
    finally:
        sender.close()
        leader.close()


def test_an_unreachable_home_is_retried():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    sender = MarkerSender(("127.0.0.1", port), lambda: None)
    try:
        sender.submit(MarkerJob("a", 1, 0, True, (("t", 0),), 0))
        assert _wait_done(sender, timeout=1.0) is None
        assert sender._thread.is_alive()
    finally:
        sender.close()


def test_leaders_are_resolved_again_after_not_leader():
    """The leader moves: the old one answers NOT_LEADER_OR_FOLLOWER, this broker's metadata
    names the new one, and the marker goes there."""
    home, new = FakeLeader(), FakeLeader()
    home.script = {("t", 0): [NOT_LEADER] * 100}
    moved = threading.Event()

    def answer_then_move(body, original=home._api_27):
        out = original(body)
        home.leader_port = new.port  # the leadership moved; the next Metadata says so
        moved.set()
        return out

    home._api_27 = answer_then_move
    sender = MarkerSender(("127.0.0.1", home.port), lambda: None)
    try:
        job = MarkerJob("a", 1, 0, True, (("t", 0),), 0)
        sender.submit(job)
        assert _wait_done(sender) == job
        assert moved.is_set() and len(home.markers) == 1
        assert [m["partitions"] for m in new.markers] == [[("t", 0)]]
    finally:
        sender.close()
        home.close()
        new.close()


def test_a_hung_leader_holds_only_its_own_markers():
    """One leader accepts connections and never answers (a SIGSTOPped broker): the job owing it
    a marker waits, and a job whose partitions are led elsewhere completes meanwhile."""
    home = FakeLeader()
    hung = socket.create_server(("127.0.0.1", 0))  # the kernel completes the handshakes; no one reads
    home.topic_ports = {"s": hung.getsockname()[1]}
    sender = MarkerSender(("127.0.0.1", home.port), lambda: None)
    try:
        stuck = MarkerJob("stuck", 1, 0, True, (("s", 0),), 0)
        sender.submit(stuck)
        time.sleep(0.3)  # its request is on its way to the hung leader
        free = MarkerJob("free", 2, 0, True, (("t", 0),), 0)
        sender.submit(free)
        assert _wait_done(sender, timeout=3.0) == free
        assert [m["pid"] for m in home.markers] == [2]
    finally:
        sender.close()
        home.close()
        hung.close()
