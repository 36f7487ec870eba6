"""The ZooKeeper login of a broker or tool, found as Kafka's JVM finds it: the JAAS file named
by ``-Djava.security.auth.login.config=<file>`` in ``KAFKA_OPTS``, its ``Client`` section (or
the one ``-Dzookeeper.sasl.clientconfig=<name>`` names), whose login module carries
``username="..." password="..."`` (ZooKeeper's DigestLoginModule). ``-Dzookeeper.sasl.client=false``
turns the login off, as in Kafka.

The file holds a password: one that every user may read is refused (the path and mode in the
message), like the TLS key files."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from typing import NamedTuple

from appliance.security.tls import TlsError, check_key_file

__all__ = ["ZkLogin", "JaasError", "zookeeper_login", "broker_zookeeper_login", "jaas_sections"]

LOGIN_CONFIG = "java.security.auth.login.config"
SECTION_PROPERTY = "zookeeper.sasl.clientconfig"
ENABLED_PROPERTY = "zookeeper.sasl.client"
DEFAULT_SECTION = "Client"

# Name { module flag option="value" ...; };   (comments: // and /* */)
_SECTION = re.compile(r"([A-Za-z0-9_.\-]+)\s*\{(.*?)\}\s*;", re.S)
_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


class JaasError(TlsError):
    """The JAAS file cannot give a ZooKeeper login (names the file and what is wrong)."""


class ZkLogin(NamedTuple):
    username: str
    password: str
    source: str  # the JAAS file, for messages

    def __repr__(self) -> str:  # never the password
        return f"ZkLogin(username={self.username!r}, source={self.source!r})"


def jaas_sections(text: str) -> dict[str, dict[str, str]]:
    """Each section's options (of its login modules, later ones winning)."""
    out: dict[str, dict[str, str]] = {}
    for name, body in _SECTION.findall(_COMMENT.sub("", text)):
        out[name] = {k: v.replace('\\"', '"') for k, v in _OPTION.findall(body)}
    return out


def _properties(env: Mapping[str, str]) -> dict[str, str]:
    props: dict[str, str] = {}
    try:
        words = shlex.split(env.get("KAFKA_OPTS", ""))
    except ValueError as e:
        raise JaasError(f"KAFKA_OPTS: {e}") from None
    for w in words:
        if w.startswith("-D") and "=" in w:
            k, v = w[2:].split("=", 1)
            props[k] = v
    return props


def zookeeper_login(env: Mapping[str, str] | None = None) -> ZkLogin | None:
    """The login to present to ZooKeeper, or None when KAFKA_OPTS names no JAAS file (or
    turns the login off). Raises JaasError: the file missing, readable by every user, without
    the section, or the section without username and password."""
    props = _properties(os.environ if env is None else env)
    path = props.get(LOGIN_CONFIG)
    if not path or props.get(ENABLED_PROPERTY, "true").lower() == "false":
        return None
    try:
        check_key_file(path, f"KAFKA_OPTS -D{LOGIN_CONFIG}")
    except TlsError as e:
        raise JaasError(str(e)) from None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise JaasError(f"{LOGIN_CONFIG}={path}: {e.strerror}") from None
    section = props.get(SECTION_PROPERTY, DEFAULT_SECTION)
    options = jaas_sections(text).get(section)
    if options is None:
        raise JaasError(f"{LOGIN_CONFIG}={path}: no {section} section (the ZooKeeper login)")
    if not options.get("username") or "password" not in options:
        raise JaasError(f"{LOGIN_CONFIG}={path}: section {section} has no username=\"...\" password=\"...\"")
    return ZkLogin(options["username"], options["password"], path)


def broker_zookeeper_login(set_acl: bool, env: Mapping[str, str] | None = None) -> ZkLogin | None:
    """A broker's login: :func:`zookeeper_login`, required when ``zookeeper.set.acl`` is on
    (Kafka refuses to start so too). Raises JaasError."""
    login = zookeeper_login(env)
    if set_acl and login is None:
        raise JaasError("zookeeper.set.acl=true needs a ZooKeeper login: a JAAS file with a Client section "
                        "(username=\"...\" password=\"...\"), named by "
                        "KAFKA_OPTS=-Djava.security.auth.login.config=<file>")
    return login
