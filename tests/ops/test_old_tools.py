"""The 0.8.2 operator tools against a real broker's data: `appliance simple-consumer-shell`
(Kafka's SimpleConsumerShell) and `appliance dump-log` on ``.index`` / ``.timeindex`` files
(DumpLogSegments), with --verify-index-only catching an entry corrupted in a copy."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import time

import pytest

from appliance.cli.main import main
from appliance.client import AdminClient, NewTopic, Producer, ProducerRecord
from tests.broker_process import BrokerProcess

TOPIC = "old-tools"
BASE_TS = 1_700_000_000_000
# one batch each (a sync producer); timestamps not in order, one repeated
RECORDS = [(b"k0", b"v0", BASE_TS + 5000), (b"k1", b"v1v1", BASE_TS + 3000),
           (b"k2", b"v2v2v2", BASE_TS + 9000), (b"k3", b"v3v3v3v3", BASE_TS + 9000)]
SEGMENT = "00000000000000000000"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker")) as b:
        with AdminClient(b.bootstrap) as a:  # an index entry for every batch after the first
            a.create_topics([NewTopic(TOPIC, 1, config={"index.interval.bytes": "1"})])
        with Producer(bootstrap_servers=b.bootstrap, producer_type="sync") as p:
            for k, v, ts in RECORDS:
                p.send(TOPIC, ProducerRecord(v, key=k, timestamp=ts)).result(10)
        yield b


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _segment(broker: BrokerProcess, suffix: str) -> str:
    return f"{broker.log_dirs[0]}/{TOPIC}-0/{SEGMENT}{suffix}"


def _batch_positions(log_path: str) -> list[int]:
    """Where each batch starts, read from the file's offset and length fields (8 + 4 bytes)."""
    data = open(log_path, "rb").read()
    pos, out = 0, []
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


# -- simple-consumer-shell ----------------------------------------------------------------------

def test_shell_prints_from_the_earliest_offset_to_the_log_end(broker, capsys):
    status, out, _ = _run(capsys, "simple-consumer-shell", "--broker-list", broker.bootstrap, "--topic", TOPIC,
                          "--partition", "0", "--offset", "-2", "--print-offsets", "--no-wait-at-logend",
                          "--property", "print.key=true")
    assert status == 0
    assert out.splitlines() == [
        "next offset = 1", "k0\tv0", "next offset = 2", "k1\tv1v1", "next offset = 3", "k2\tv2v2v2",
        "next offset = 4", "k3\tv3v3v3v3", f"Terminating. Reached the end of partition ({TOPIC}, 0) at offset 4"]


def test_shell_offset_and_max_messages(broker, capsys):
    argv = ["simple-consumer-shell", "--broker-list", broker.bootstrap, "--topic", TOPIC, "--clientId", "old-shell",
            "--fetchsize", "100", "--max-wait-ms", "100"]
    assert _run(capsys, *argv, "--offset", "1", "--max-messages", "2")[1] == "v1v1\nv2v2v2\n"
    assert _run(capsys, *argv, "--offset", "-1", "--no-wait-at-logend")[1] == \
        f"Terminating. Reached the end of partition ({TOPIC}, 0) at offset 4\n"


def test_shell_waits_at_the_log_end_for_new_messages(broker, tmp_path):
    topic = "old-tools-wait"
    with Producer(bootstrap_servers=broker.bootstrap, producer_type="sync") as p:
        p.send(topic, b"first").result(10)
        shell = subprocess.Popen([sys.executable, "-m", "appliance.cli.main", "simple-consumer-shell",
                                  "--broker-list", broker.bootstrap, "--topic", topic, "--max-messages", "2",
                                  "--max-wait-ms", "200"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert shell.stdout.readline() == b"first\n"
            time.sleep(0.5)  # it is now waiting at the log end
            assert shell.poll() is None
            p.send(topic, b"second").result(10)
            out, err = shell.communicate(timeout=30)
        finally:
            shell.kill()
    assert shell.returncode == 0, err
    assert out == b"second\n"


def test_shell_usage_errors(broker, capsys):
    status, _, err = _run(capsys, "simple-consumer-shell", "--broker-list", broker.bootstrap, "--topic", TOPIC,
                          "--replica", "2")
    assert status == 2 and "--replica 2" in err


# -- dump-log on index files ----------------------------------------------------------------------

def test_offset_and_time_index_entries(broker, capsys):
    index, timeindex = _segment(broker, ".index"), _segment(broker, ".timeindex")
    status, out, err = _run(capsys, "dump-log", "--files", f"{index},{timeindex}")
    positions = _batch_positions(_segment(broker, ".log"))
    assert status == 0 and err == ""
    # an offset entry per batch after the first (its last offset, where it starts); a time
    # entry each time the largest timestamp grows (offsets 0 and 2)
    assert out.splitlines() == [f"Dumping {index}"] + [
        f"offset: {i} position: {positions[i]}" for i in (1, 2, 3)] + [
        f"Dumping {timeindex}", f"timestamp: {BASE_TS + 5000} offset: 0", f"timestamp: {BASE_TS + 9000} offset: 2"]


def test_verify_index_only_passes_on_the_broker_files(broker, capsys):
    files = f"{_segment(broker, '.index')},{_segment(broker, '.timeindex')}"
    status, out, err = _run(capsys, "dump-log", "--files", files, "--verify-index-only")
    assert (status, err) == (0, "")
    assert out.splitlines() == [f"Dumping {f}" for f in files.split(",")]
    status, out, _ = _run(capsys, "dump-log", "--files", files, "--index-sanity-check")
    assert status == 0 and out.splitlines()[1] == f"{_segment(broker, '.index')} passed sanity check."


def test_verify_index_only_reports_a_corrupted_entry(broker, capsys, tmp_path):
    copy = tmp_path / f"{TOPIC}-0"
    copy.mkdir()
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copyfile(_segment(broker, suffix), copy / f"{SEGMENT}{suffix}")
    index, timeindex = str(copy / f"{SEGMENT}.index"), str(copy / f"{SEGMENT}.timeindex")
    with open(index, "r+b") as f:  # entry 1 (offset 2) now says offset 7: (relative offset, position)
        f.seek(8)
        rel, pos = struct.unpack(">ii", f.read(8))
        assert rel == 2
        f.seek(8)
        f.write(struct.pack(">ii", 7, pos))
    with open(timeindex, "r+b") as f:  # entry 1's timestamp one ms later than the log's
        f.seek(12)
        f.write(struct.pack(">q", BASE_TS + 9001))
    status, out, err = _run(capsys, "dump-log", "--files", f"{index},{timeindex}", "--verify-index-only")
    assert status == 1
    assert out.splitlines() == [f"Dumping {index}", f"Dumping {timeindex}"]
    assert err.splitlines() == [
        f"Mismatches in :{index}", "  Index offset: 7, log offset: 2",
        f"Found timestamp mismatch in :{timeindex}",
        f"  Index timestamp: {BASE_TS + 9001}, log timestamp: {BASE_TS + 9000}"]
