"""Today's clients negotiate flexible versions (KIP-482) against a real broker.

confluent-kafka (librdkafka), kafka-python and aiokafka, at the versions installed, each run a
produce / consume-in-a-group / commit (and admin) round through a capturing proxy (the broker
advertises the proxy, so every connection passes it). The versions read off the wire must be,
for every API, the newest version both the client and the broker know, and every record must
come back. A client's own maximum comes from its protocol classes where it has them
(kafka-python, aiokafka) and from the caps written in its code otherwise (listed below).
"""

from __future__ import annotations

import asyncio
import uuid
import warnings

import pytest

from appliance.protocol.registry import API_BY_KEY, SUPPORTED_VERSIONS
from tests.broker_process import BrokerProcess
from tests.generations.capture import CaptureProxy
from tests.generations.conftest import FAST_GROUPS

pytestmark = pytest.mark.timeout(180)

N = 50
PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN, HEARTBEAT, SYNC = 8, 9, 10, 11, 12, 14
CREATE_TOPICS = 19
DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS = 60, 61
FIRST_TOPIC_ID_FETCH = 13

# librdkafka 2.x's own maxima where they are below ours (rdkafka_request.c / rdkafka_cgrp.c:
# its classic group protocol stops before the flexible versions; ListOffsets at 7); every other
# API it uses it can run at our newest version
LIBRDKAFKA_CAPS = {FIND_COORDINATOR: 2, JOIN: 5, HEARTBEAT: 3, 13: 1, SYNC: 3, CREATE_TOPICS: 4,
                   LIST_OFFSETS: 7}
# kafka-python 3.0 has classes for newer versions than its coordinator and fetcher send
# (kafka/coordinator/base.py: JoinGroup max_version=7; kafka/consumer/fetcher.py: Fetch 12,
# names, no topic ids)
KAFKA_PYTHON_CAPS = {JOIN: 7, FETCH: 12}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("flexible"), overrides=FAST_GROUPS)
    proxy = CaptureProxy(broker.port)
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    try:
        with broker:
            yield broker, proxy
    finally:
        proxy.close()


def newest_shared(client_max: dict[int, int]) -> dict[int, int]:
    """api_key -> the newest version both the client and the broker speak."""
    return {k: min(v, SUPPORTED_VERSIONS[k][1]) for k, v in client_max.items() if k in SUPPORTED_VERSIONS}


def aiokafka_max() -> dict[int, int]:
    """The newest version aiokafka implements of each API (its request classes)."""
    import aiokafka.protocol.admin  # noqa: F401  (import every request module)
    import aiokafka.protocol.commit  # noqa: F401
    import aiokafka.protocol.coordination  # noqa: F401
    import aiokafka.protocol.fetch  # noqa: F401
    import aiokafka.protocol.group  # noqa: F401
    import aiokafka.protocol.metadata  # noqa: F401
    import aiokafka.protocol.offset  # noqa: F401
    import aiokafka.protocol.produce  # noqa: F401
    from aiokafka.protocol.api import Request

    out = {}
    stack = list(Request.__subclasses__())
    while stack:
        c = stack.pop()
        stack += c.__subclasses__()
        classes = getattr(c, "_CLASSES", None)
        if classes:
            out[c.API_KEY] = max(out.get(c.API_KEY, -1), *(k.API_VERSION for k in classes))
    return out


def kafka_python_max() -> dict[int, int]:
    """The newest version kafka-python implements of each API (its JSON-driven classes)."""
    from kafka.protocol import api_message

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)
    out = {}
    for c in subclasses(api_message.ApiMessage):
        try:
            if c.type == "request":
                out[c.API_KEY] = max(out.get(c.API_KEY, -1), c.max_version)
        except Exception:  # abstract intermediates
            continue
    return out


def test_confluent_kafka_uses_flexible_versions(proxied):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker, proxy = proxied
    boot = f"127.0.0.1:{proxy.port}"
    topic, group = f"flex-ck-{uuid.uuid4().hex[:6]}", f"g-ck-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": boot, "client.id": "cap-ck-admin"})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    # describe_cluster: librdkafka 2.16 builds it from a Metadata request (not API 60, which
    # kafka-python's admin client uses: see below); the answer must still be right
    cluster = admin.describe_cluster(request_timeout=30).result(30)
    assert cluster.cluster_id == "appliance-0" and cluster.controller.id == 0
    assert [(n.id, n.port) for n in cluster.nodes] == [(0, proxy.port)]
    p = Producer({"bootstrap.servers": boot, "client.id": "cap-ck-producer", "enable.idempotence": True})
    for i in range(N):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": boot, "client.id": "cap-ck-consumer", "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    try:
        while len(got) < N:
            m = c.poll(30)
            assert m is not None, f"only {len(got)} of {N} records"
            assert m.error() is None, m.error()
            got.append(m.value())
        c.commit(asynchronous=False)
        assert c.committed([m_tp for m_tp in c.assignment()], timeout=30)
    finally:
        c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(N))
    seen = proxy.versions("cap-ck")
    print("confluent-kafka versions:", {k: sorted(v) for k, v in sorted(seen.items())})
    for key in (API_VERSIONS, METADATA, PRODUCE, FETCH, FIND_COORDINATOR, JOIN, SYNC,
                OFFSET_COMMIT, OFFSET_FETCH, CREATE_TOPICS):
        assert key in seen, f"api {key} not used: {seen}"
    for key, versions in seen.items():
        assert versions == {LIBRDKAFKA_CAPS.get(key, SUPPORTED_VERSIONS[key][1])}, (key, versions)
    # every record above came back through Fetch by topic id (KIP-516): librdkafka took the ids
    # from Metadata v12 and named no topic in its fetches
    assert min(seen[FETCH]) >= FIRST_TOPIC_ID_FETCH
    # the data path runs flexible: ApiVersions v3, Metadata v12, Produce v9, Fetch v12, ...
    for key in (API_VERSIONS, METADATA, PRODUCE, FETCH, OFFSET_COMMIT, OFFSET_FETCH):
        assert API_BY_KEY[key].is_flexible(max(seen[key])), key


def test_kafka_python_uses_the_newest_shared_versions(proxied):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
        from kafka.admin import NewTopic

    broker, proxy = proxied
    boot = f"127.0.0.1:{proxy.port}"
    topic, group = f"flex-kp-{uuid.uuid4().hex[:6]}", f"g-kp-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=boot, client_id="cap-kp-admin")
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=boot, client_id="cap-kp-producer")
    for i in range(N):
        p.send(topic, key=str(i).encode(), value=f"v{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=boot, client_id="cap-kp-consumer", group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=30000)
    got = []
    try:
        for m in c:
            got.append(m.value)
            if len(got) == N:
                break
        c.commit()
    finally:
        c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(N))
    seen = proxy.versions("cap-kp")
    print("kafka-python versions:", {k: sorted(v) for k, v in sorted(seen.items())})
    expected = newest_shared({**kafka_python_max(), **KAFKA_PYTHON_CAPS})
    for key in (METADATA, PRODUCE, FETCH, FIND_COORDINATOR, JOIN, SYNC, OFFSET_COMMIT, OFFSET_FETCH,
                CREATE_TOPICS):
        assert key in seen, f"api {key} not used: {seen}"
    for key, versions in seen.items():
        if key == API_VERSIONS:
            # it probes its newest (v4), gets our v0-layout fallback, and retries with ours
            assert max(versions) > SUPPORTED_VERSIONS[key][1]
            assert SUPPORTED_VERSIONS[key][1] in versions
            continue
        assert versions == {expected[key]}, (key, versions, expected[key])
    for key in (METADATA, PRODUCE, FETCH, OFFSET_COMMIT, OFFSET_FETCH, SYNC, CREATE_TOPICS):
        assert API_BY_KEY[key].is_flexible(max(seen[key])), key


def test_aiokafka_uses_the_newest_shared_versions(proxied):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    broker, proxy = proxied
    boot = f"127.0.0.1:{proxy.port}"
    topic, group = f"flex-ak-{uuid.uuid4().hex[:6]}", f"g-ak-{uuid.uuid4().hex[:6]}"

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=boot, client_id="cap-ak-producer")
        await p.start()
        try:
            for i in range(N):
                await p.send(topic, key=str(i).encode(), value=f"v{i}".encode())
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=boot, client_id="cap-ak-consumer", group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got = []
        try:
            while len(got) < N:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                got += [m.value for ms in batch.values() for m in ms]
            await c.commit()
        finally:
            await c.stop()
        return got

    got = asyncio.run(asyncio.wait_for(run(), 120))
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(N))
    seen = proxy.versions("cap-ak")
    print("aiokafka versions:", {k: sorted(v) for k, v in sorted(seen.items())})
    # aiokafka implements no flexible version yet: it must still get its newest ones
    expected = newest_shared(aiokafka_max())
    for key in (METADATA, PRODUCE, FETCH, FIND_COORDINATOR, JOIN, SYNC, OFFSET_COMMIT):
        assert key in seen, f"api {key} not used: {seen}"
    for key, versions in seen.items():
        if key == API_VERSIONS:
            continue  # aiokafka probes with v0 by design
        assert versions == {expected[key]}, (key, versions, expected[key])


def test_new_version_fields_take_effect(proxied):
    """The fields the flexible versions added are acted on, over the real broker."""
    from appliance.client.connection import BrokerConnection
    from appliance.client.subscription import encode_subscription

    broker, _ = proxied
    topic, group = f"flex-raw-{uuid.uuid4().hex[:6]}", f"g-raw-{uuid.uuid4().hex[:6]}"
    with BrokerConnection("127.0.0.1", broker.port) as c:
        # CreateTopics v7: partition count and replication factor answered (defaults filled in)
        made = c.request(CREATE_TOPICS, {"topics": [{"name": topic, "num_partitions": -1,
                                                     "replication_factor": -1}]}, version=7).topics[0]
        assert (made.error_code, made.num_partitions, made.replication_factor) == (0, 1, 1)
        assert made.topic_id != bytes(16)  # KIP-516: the new topic's id
        # Metadata v12 asked by topic id alone: unknown ones UNKNOWN_TOPIC_ID, ours by its name
        md = c.request(METADATA, {"topics": [{"topic_id": b"\x01" * 16, "name": None},
                                             {"topic_id": made.topic_id, "name": None}],
                                  "allow_auto_topic_creation": False}, version=12)
        by_name = {t.name: t for t in md.topics}
        assert by_name[None].error_code == 100 and by_name[topic].error_code == 0
        assert by_name[topic].topic_id == made.topic_id
        # DescribeConfigs v4: each key's type and, when asked, its documentation
        res = c.request(32, {"resources": [{"resource_type": 2, "resource_name": topic,
                                            "configuration_keys": ["retention.ms"]}],
                             "include_documentation": True}, version=4).results[0]
        [entry] = res.configs
        assert entry.config_type == 5 and entry.documentation  # LONG
        # DescribeLogDirs v4: the dir's capacity
        [d] = c.request(35, {"topics": None}, version=4).results
        assert d.total_bytes > 0 and 0 <= d.usable_bytes <= d.total_bytes
        # FindCoordinator v3, then a group through JoinGroup v9 / SyncGroup v5 / ListGroups v4
        coord = c.request(FIND_COORDINATOR, {"key": group, "key_type": 0}, version=3)
        assert coord.error_code == 0
    with BrokerConnection(coord.host, coord.port) as g:
        join = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
                "member_id": "", "protocol_type": "consumer", "reason": "test",
                "protocols": [{"name": "range", "metadata": encode_subscription([topic])}]}
        first = g.request(JOIN, join, version=9)
        assert first.error_code == 79  # MEMBER_ID_REQUIRED (KIP-394), then join with it
        joined = g.request(JOIN, {**join, "member_id": first.member_id}, version=9)
        assert joined.error_code == 0 and joined.protocol_type == "consumer"
        assert joined.protocol_name == "range" and not joined.skip_assignment
        sync = {"group_id": group, "generation_id": joined.generation_id, "member_id": joined.member_id,
                "protocol_type": "consumer", "protocol_name": "roundrobin", "assignments": []}
        assert g.request(SYNC, sync, version=5).error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
        synced = g.request(SYNC, {**sync, "protocol_name": "range"}, version=5)
        assert (synced.error_code, synced.protocol_type, synced.protocol_name) == (0, "consumer", "range")
        stable = g.request(16, {"states_filter": ["stable"]}, version=4).groups
        assert [(x.group_id, x.group_state) for x in stable if x.group_id == group] == [(group, "Stable")]
        assert group not in [x.group_id for x in g.request(16, {"states_filter": ["Empty"]}, version=4).groups]
        # LeaveGroup v5: a batch, each member answered on its own
        left = g.request(13, {"group_id": group, "members": [
            {"member_id": joined.member_id, "reason": "done"}, {"member_id": "nobody"}]}, version=5)
        assert left.error_code == 0
        assert [(m.member_id, m.error_code) for m in left.members] == [(joined.member_id, 0), ("nobody", 25)]
        empty = g.request(16, {"states_filter": ["Empty"]}, version=4).groups
        assert group in [x.group_id for x in empty]


def test_kcat_reads_through_the_versions_its_librdkafka_knows(proxied):
    """kcat (the system's, on librdkafka 2.0.2) produces and consumes with negotiation on. Its
    librdkafka predates topic ids: its Fetch stops at 11, named topics, and it reads every
    record; a newer librdkafka takes Fetch 13+ (the confluent-kafka test above)."""
    import subprocess

    _, proxy = proxied
    boot = f"127.0.0.1:{proxy.port}"
    topic = f"flex-kc-{uuid.uuid4().hex[:6]}"
    lines = b"".join(b"v%d\n" % i for i in range(N))
    subprocess.run(["kcat", "-b", boot, "-X", "client.id=cap-kcat-p", "-P", "-t", topic, "-p", "0"],
                   input=lines, check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", boot, "-X", "client.id=cap-kcat-c", "-C", "-t", topic,
                          "-o", "beginning", "-c", str(N), "-e", "-q"],
                         capture_output=True, check=True, timeout=60).stdout
    assert out.split() == [b"v%d" % i for i in range(N)]
    seen = proxy.versions("cap-kcat")
    print("kcat versions:", {k: sorted(v) for k, v in sorted(seen.items())})
    # librdkafka 2.0's own maxima (rdkafka_request.c): Fetch 11, Produce 7, Metadata 4
    assert (seen[FETCH], seen[PRODUCE], seen[METADATA]) == ({11}, {7}, {4})


def test_kafka_python_admin_describes_cluster_and_producers(proxied):
    """kafka-python's admin client sends DescribeCluster (60) and DescribeProducers (61), at the
    newest version both know, and reads the idempotent producer's state back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

    _, proxy = proxied
    boot = f"127.0.0.1:{proxy.port}"
    topic = f"flex-kpa-{uuid.uuid4().hex[:6]}"
    p = KafkaProducer(bootstrap_servers=boot, client_id="cap-kpa-producer", enable_idempotence=True)
    for i in range(N):
        p.send(topic, value=f"v{i}".encode(), partition=0)
    p.flush(30)
    p.close()
    admin = KafkaAdminClient(bootstrap_servers=boot, client_id="cap-kpa-admin")
    try:
        cluster = admin.describe_cluster()
        states = admin.describe_producers([TopicPartition(topic, 0)])
    finally:
        admin.close()
    assert cluster["cluster_id"] == "appliance-0" and cluster["controller_id"] == 0
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(0, proxy.port)]
    [state] = states[TopicPartition(topic, 0)].active_producers
    assert state.producer_id >= 0 and state.last_sequence == N - 1 and state.last_timestamp > 0
    seen = proxy.versions("cap-kpa-admin")
    print("kafka-python admin versions:", {k: sorted(v) for k, v in sorted(seen.items())})
    expected = newest_shared(kafka_python_max())
    assert seen[DESCRIBE_CLUSTER] == {expected[DESCRIBE_CLUSTER]}
    assert seen[DESCRIBE_PRODUCERS] == {expected[DESCRIBE_PRODUCERS]}
