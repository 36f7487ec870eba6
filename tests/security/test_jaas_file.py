"""The ZooKeeper login read from KAFKA_OPTS' JAAS file (security/jaas_file.py), on real files."""

from __future__ import annotations

import pytest

from appliance.security.jaas_file import (
    JaasError,
    broker_zookeeper_login,
    jaas_sections,
    zookeeper_login,
)

TEXT = """/* the broker's own listener logins live in server.properties; this file is ZooKeeper's */
KafkaServer {
   org.apache.kafka.common.security.plain.PlainLoginModule required
   username="admin" password="admin-secret";
};
// the ZooKeeper login
Client {
   org.apache.zookeeper.server.auth.DigestLoginModule required
   username="kafka"
   password="zk \\"quoted\\" secret";
};
ZkOther { org.apache.zookeeper.server.auth.DigestLoginModule required username="other" password="o"; };
"""


@pytest.fixture
def jaas(tmp_path):
    p = tmp_path / "jaas.conf"
    p.write_text(TEXT)
    p.chmod(0o640)
    return p


def _env(path, *more: str) -> dict[str, str]:
    return {"KAFKA_OPTS": " ".join(["-Xmx1g", f"-Djava.security.auth.login.config={path}", *more])}


def test_sections_and_the_client_login(jaas):
    assert set(jaas_sections(TEXT)) == {"KafkaServer", "Client", "ZkOther"}
    login = zookeeper_login(_env(jaas))
    assert (login.username, login.password, login.source) == ("kafka", 'zk "quoted" secret', str(jaas))
    assert "secret" not in repr(login)


def test_the_section_named_by_zookeeper_sasl_clientconfig_and_the_login_turned_off(jaas):
    assert zookeeper_login(_env(jaas, "-Dzookeeper.sasl.clientconfig=ZkOther")).username == "other"
    assert zookeeper_login(_env(jaas, "-Dzookeeper.sasl.client=false")) is None
    assert zookeeper_login({}) is None and zookeeper_login({"KAFKA_OPTS": "-Xmx1g"}) is None


@pytest.mark.parametrize("case,needle", [
    ("missing", "No such file"),
    ("world-readable", "0644"),
    ("no-section", "no Client section"),
    ("no-password", "has no username"),
])
def test_bad_files_are_refused_with_the_path(tmp_path, case, needle):
    p = tmp_path / "jaas.conf"
    if case != "missing":
        body = {"no-section": "KafkaServer { x required; };",
                "no-password": 'Client { m required username="kafka"; };'}.get(case, TEXT)
        p.write_text(body)
        p.chmod(0o644 if case == "world-readable" else 0o600)
    with pytest.raises(JaasError) as e:
        zookeeper_login(_env(p))
    assert needle in str(e.value) and str(p) in str(e.value)


def test_zookeeper_set_acl_needs_a_login():
    with pytest.raises(JaasError, match="zookeeper.set.acl=true needs a ZooKeeper login"):
        broker_zookeeper_login(True, {})
    assert broker_zookeeper_login(False, {}) is None
