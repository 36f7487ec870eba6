"""Dynamic broker configs: the few broker keys IncrementalAlterConfigs may change while the
broker runs, kept in a file so they survive a restart.

Which keys: only those every disk worker honours at once, because it reads them afresh each
time it uses them (:data:`DYNAMIC_BROKER_KEYS`): the retention defaults (``log.retention.ms``,
``log.retention.bytes``; the retention check reads the partition's config on each pass), the
flush policy defaults (``log.flush.interval.messages``, ``log.flush.interval.ms``) and the
delay before deleted segment files are removed (``log.segment.delete.delay.ms``). Kafka allows
more per broker (``log.segment.bytes``, ``log.cleaner.threads``, ...), but a segment keeps the
size and roll settings it was opened with and the cleaner's threads are fixed here, so those
stay read-only rather than accepted and ignored.

Two levels, as Kafka's ``/config/brokers/<id>`` and ``/config/brokers/<default>``: this broker's
own values (source DYNAMIC_BROKER_CONFIG) win over the cluster-wide defaults (source
DYNAMIC_DEFAULT_BROKER_CONFIG), which win over server.properties. Topic overrides win over all
of them. The file is ``dynamic-broker-configs.json`` in the first log dir, replaced atomically
(written, fsynced, renamed, directory fsynced); writers (network workers) hold an flock on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from appliance.config import BROKER_KEYS, BrokerConfig, ConfigError
from appliance.storage.checkpoint import fsync_dir

__all__ = ["DYNAMIC_BROKER_KEYS", "FILE_NAME", "DynamicConfigs", "load", "save", "locked",
           "effective_config", "validate"]

DYNAMIC_BROKER_KEYS = frozenset({
    "log.retention.ms", "log.retention.bytes", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.segment.delete.delay.ms",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})
FILE_NAME = "dynamic-broker-configs.json"
_KEYS = {k.name: k for k in BROKER_KEYS}


@dataclass
class DynamicConfigs:
    """Raw string values: ``broker`` (this broker's own) and ``default`` (cluster-wide)."""

    broker: dict[str, str] = field(default_factory=dict)
    default: dict[str, str] = field(default_factory=dict)

    def value_of(self, key: str) -> str | None:
        """The dynamic value in force for ``key`` (the broker's own, else the default)."""
        return self.broker.get(key, self.default.get(key))


def _path(config: BrokerConfig) -> str:
    return os.path.join(config.log_dirs[0], FILE_NAME)


def load(config: BrokerConfig) -> DynamicConfigs:
    """The saved dynamic configs ({} when none). A file that cannot be read as ours is an
    error naming it: silently dropping an operator's settings would be worse."""
    path = _path(config)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return DynamicConfigs()
    except (OSError, ValueError) as e:
        raise ConfigError(path, "", f"unreadable dynamic broker config file: {e}") from e
    return DynamicConfigs({str(k): str(v) for k, v in doc.get("broker", {}).items()},
                          {str(k): str(v) for k, v in doc.get("default", {}).items()})


def save(config: BrokerConfig, dyn: DynamicConfigs) -> None:
    """Replace the file atomically. Raises OSError."""
    path = _path(config)
    tmp = path + ".tmp"
    data = json.dumps({"broker": dyn.broker, "default": dyn.default}, indent=1, sort_keys=True)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


@contextlib.contextmanager
def locked(config: BrokerConfig) -> Iterator[None]:
    """Hold the writers' lock (two network workers may alter at once)."""
    fd = os.open(_path(config) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def validate(values: Mapping[str, str]) -> None:
    """Raise ConfigError for a key that is not a dynamic broker key or a bad value."""
    for key, raw in values.items():
        if key not in DYNAMIC_BROKER_KEYS:
            reason = ("cannot be changed while the broker runs (read-only here)" if key in _KEYS
                      else "unknown broker configuration key")
            raise ConfigError(key, raw, reason)
        _KEYS[key].parse(raw)


def effective_config(static: BrokerConfig, dyn: DynamicConfigs) -> BrokerConfig:
    """``static`` with the dynamic values in force applied (what the disk workers run with)."""
    changes = {}
    for key in DYNAMIC_BROKER_KEYS:
        raw = dyn.value_of(key)
        if raw is not None:
            changes[key] = _KEYS[key].parse(raw)
    return static.with_values(changes) if changes else static
