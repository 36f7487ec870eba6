"""DescribeConfigs entries as Kafka builds them: each key's value, its source, its synonyms (the
keys that could have set it, in precedence order), and its read-only and sensitive flags.

Topic keys: the topic's override (DYNAMIC_TOPIC_CONFIG), else a dynamic broker value of a
synonym (DYNAMIC_BROKER_CONFIG, then DYNAMIC_DEFAULT_BROKER_CONFIG; see
:mod:`appliance.dynamic_config`), else the first broker synonym set in server.properties
or on the command line (STATIC_BROKER_CONFIG), else the default of the last synonym in the chain
(DEFAULT_CONFIG), as Kafka's ``LogConfig`` chains work. Broker keys: dynamic, static or default;
read-only unless they are dynamic broker keys; a broker key that heads a topic key's chain
(``log.retention.ms`` ...) lists the chain's broker keys as its synonyms.
"""

from __future__ import annotations

from typing import Any

from appliance.config import BROKER_KEYS, TOPIC_KEYS, TopicConfig
from appliance.dynamic_config import DYNAMIC_BROKER_KEYS, DynamicConfigs

__all__ = ["topic_entries", "broker_entries", "default_broker_entries", "DYNAMIC_TOPIC_CONFIG",
           "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG",
           "DEFAULT_CONFIG"]

# Kafka's ConfigSource ids (DescribeConfigsResponse)
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
_NO_DYNAMIC = DynamicConfigs()
_BROKER_DEFAULTS = {k.name: k.default for k in BROKER_KEYS}
# a broker key heading a topic key's chain has the chain's broker keys as its synonyms
_BROKER_CHAINS = {k.synonyms[0][0]: [name for name, _ in k.synonyms] for k in TOPIC_KEYS}


def fmt(v: Any) -> str | None:
    """A config value as Kafka's describe shows it."""
    if v is None:
        return None
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list | tuple):
        return ",".join(map(str, v))
    return str(v)


def _is_sensitive(name: str) -> bool:
    # Kafka's PASSWORD-typed keys; their values are never shown
    return "password" in name or name in ("ssl.keystore.key", "sasl.jaas.config") or name.endswith(".sasl.jaas.config")


def _broker_synonyms(config: Any, chain: list[str], dyn: DynamicConfigs) -> list[dict]:
    out = [{"name": b, "value": dyn.broker[b], "source": DYNAMIC_BROKER_CONFIG}
           for b in chain if b in dyn.broker]
    out += [{"name": b, "value": dyn.default[b], "source": DYNAMIC_DEFAULT_BROKER_CONFIG}
            for b in chain if b in dyn.default]
    out += [{"name": b, "value": fmt(config.get(b)), "source": STATIC_BROKER_CONFIG}
            for b in chain if config.is_set(b)]
    for b in reversed(chain):  # the chain's default is the last key's that has one
        if _BROKER_DEFAULTS.get(b) is not None:
            out.append({"name": b, "value": fmt(_BROKER_DEFAULTS[b]), "source": DEFAULT_CONFIG})
            break
    return out


def topic_entries(config: Any, overrides: dict[str, str], keys: list[str] | None,
                  synonyms: bool, dyn: DynamicConfigs = _NO_DYNAMIC) -> list[dict]:
    """The entries of a topic with these overrides (``keys`` None = every key); ``config`` is
    the broker's effective config (its dynamic values ``dyn`` applied)."""
    cfg = TopicConfig.from_overrides(config, overrides)
    out = []
    for key in TOPIC_KEYS:
        if keys is not None and key.name not in keys:
            continue
        chain = [name for name, _ in key.synonyms]
        found = _broker_synonyms(config, chain, dyn)
        if key.name in overrides:
            found.insert(0, {"name": key.name, "value": overrides[key.name], "source": DYNAMIC_TOPIC_CONFIG})
        source = found[0]["source"] if found else DEFAULT_CONFIG
        out.append({"name": key.name, "value": fmt(cfg[key.name]), "read_only": False,
                    "config_source": source, "is_default": source == DEFAULT_CONFIG,
                    "is_sensitive": False, "synonyms": found if synonyms else []})
    return out


def broker_entries(config: Any, keys: list[str] | None, synonyms: bool,
                   dyn: DynamicConfigs = _NO_DYNAMIC) -> list[dict]:
    """The entries of this broker's configuration (``keys`` None = every key); ``config`` is
    its effective config (the dynamic values ``dyn`` applied)."""
    out = []
    for name, value in sorted(config.items().items()):
        if keys is not None and name not in keys:
            continue
        if name in dyn.broker:
            source = DYNAMIC_BROKER_CONFIG
        elif name in dyn.default:
            source = DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            source = STATIC_BROKER_CONFIG if config.is_set(name) else DEFAULT_CONFIG
        sensitive = _is_sensitive(name)
        found = _broker_synonyms(config, _BROKER_CHAINS.get(name, [name]), dyn) if synonyms else []
        if sensitive:
            found = [{**s, "value": None} for s in found]
        out.append({"name": name, "value": None if sensitive else fmt(value),
                    "read_only": name not in DYNAMIC_BROKER_KEYS,
                    "config_source": source, "is_default": source == DEFAULT_CONFIG,
                    "is_sensitive": sensitive, "synonyms": found})
    return out


def default_broker_entries(dyn: DynamicConfigs, keys: list[str] | None, synonyms: bool) -> list[dict]:
    """The cluster-wide dynamic defaults (resource name ""), as Kafka describes that entity:
    only the keys set at that level."""
    return [{"name": name, "value": value, "read_only": False,
             "config_source": DYNAMIC_DEFAULT_BROKER_CONFIG, "is_default": False, "is_sensitive": False,
             "synonyms": [{"name": name, "value": value, "source": DYNAMIC_DEFAULT_BROKER_CONFIG}] if synonyms else []}
            for name, value in sorted(dyn.default.items()) if keys is None or name in keys]
