"""console-consumer --group (built on appliance.client.Consumer): members resume from the
group's committed offsets."""

from __future__ import annotations

import subprocess
import sys

from appliance.client import AdminClient, NewTopic, Producer


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args], capture_output=True, timeout=60)


def test_console_consumer_group_resumes_from_commits(module_broker, topic_name):
    bs = ("--bootstrap-server", module_broker.bootstrap)
    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 2)])
    with Producer(bootstrap_servers=module_broker.bootstrap) as p:
        for i in range(20):
            p.send(topic_name, b"m%d" % i, partition=i % 2)
        p.flush()
    seen = []
    for _ in range(2):
        res = _cli("console-consumer", "--topic", topic_name, "--group", f"cg-{topic_name}", "--from-beginning",
                   "--max-messages", "10", *bs)
        assert res.returncode == 0, res.stderr
        seen += res.stdout.decode().split()
    assert sorted(seen) == sorted(f"m{i}" for i in range(20))  # the second run went on where the first stopped
    res = _cli("console-consumer", "--topic", topic_name, "--group", "x", "--partition", "0", *bs)
    assert res.returncode == 2 and b"--group" in res.stderr
