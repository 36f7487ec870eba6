"""README's configuration table, rendered from the key declarations so it cannot drift.

For every key of the config tables of the seeds' Kafka 0.8.2 documentation (broker 3.1, consumer
3.2, producer 3.3, new producer 3.4) the table says what it does here: honoured (and whether our
default differs from 0.8.2's), accepted with no effect and why, or unknown. The broker's answers
come from :mod:`appliance.config` (``BROKER_KEYS``, ``NO_EFFECT``, ``KAFKA_ONLY_KEYS``), the
clients' from every ``*_KEYS`` tuple of :mod:`appliance.client.config` (whichever exist: a
ZooKeeper consumer's or an old producer's tuple is picked up when declared). Broker keys beyond
0.8.2's table follow in a second table.

The 0.8.2 key lists come from :mod:`appliance.cli.seed_keys` (vendored in
``docs/kafka-0.8.2-config-keys.txt``).

``python -m appliance.cli.config_table`` rewrites the table between the markers in README.md;
``--check`` exits 1 when README.md is stale.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import appliance.client.config as client_config
from appliance import config as broker_config
from appliance.cli.seed_keys import SECTIONS, VENDORED, parse_vendored

__all__ = ["START", "END", "broker_row", "client_row", "client_key_tuples", "render_table",
           "replace_table", "main"]

START = "<!-- config-table:start -->"
END = "<!-- config-table:end -->"
README = Path(__file__).resolve().parents[2] / "README.md"

# -- what each key does here ------------------------------------------------------------------

_NAMED = {"Long.MaxValue": broker_config.LONG_MAX, "Int.MaxValue": broker_config.INT_MAX,
          "Double.MaxValue": broker_config.DOUBLE_MAX}


def _comparable(text: str) -> Any:
    """A 0.8.2 default as a value, or None when it is not one (unset, a unit, a class name)."""
    text = text.strip()
    if text in ("null", "–", ""):
        return None
    if text in _NAMED:
        return _NAMED[text]
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+( *\* *\d+)*", text):
        v = 1
        for part in text.split("*"):
            v *= int(part)
        return v
    if re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    if re.fullmatch(r"[a-z]+", text):  # delete, range, zookeeper ...
        return text
    return None


def _ours(value: Any) -> str:
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _differs(kafka_default: str, ours: Any) -> bool:
    theirs = _comparable(kafka_default)
    if theirs is None or ours is None:
        return False
    if isinstance(ours, list | tuple) and len(ours) == 1:
        ours = ours[0]
    return theirs != ours


def broker_row(key: str, kafka_default: str) -> tuple[str, str, str, str]:
    """(key, 0.8.2 default, default here, what it does here) of one broker key."""
    declared = {k.name: k for k in broker_config.BROKER_KEYS}
    k = declared.get(key)
    if key in broker_config.KAFKA_ONLY_KEYS:
        return key, kafka_default, "-", f"accepted, no effect: {broker_config.KAFKA_ONLY_KEYS[key]}"
    if k is None:
        return key, kafka_default, "-", "unknown here: warned about and ignored"
    if key in broker_config.NO_EFFECT:
        return key, kafka_default, _ours(k.default), f"accepted, no effect: {broker_config.NO_EFFECT[key]}"
    verdict = "honoured, another default" if _differs(kafka_default, k.default) else "honoured"
    return key, kafka_default, _ours(k.default), f"{verdict}: {k.doc}"


def client_key_tuples() -> dict[str, tuple[Any, ...]]:
    """Every ``*_KEYS`` tuple of Key that appliance.client.config declares, by name."""
    return {name: value for name, value in vars(client_config).items()
            if name.endswith("_KEYS") and isinstance(value, tuple)
            and all(isinstance(k, client_config.Key) for k in value)}


def _search_order(section: str, tuples: Mapping[str, tuple[Any, ...]]) -> list[str]:
    """Which tuples answer for a client section, best first: the 0.8 clients' own tuples (a
    ZK_CONSUMER_KEYS, an OLD_PRODUCER_KEYS) before the modern client's for the 0.8 sections."""
    kind = "PRODUCER" if "producer" in section else "CONSUMER"
    modern = [n for n in (f"{kind}_KEYS",) if n in tuples]
    old = sorted(n for n in tuples if kind in n and n not in modern)
    return modern + old if section == "new producer" else old + modern


def _label(tuple_name: str) -> str:
    return tuple_name.removesuffix("_KEYS").replace("_", " ").lower().replace("zk", "ZooKeeper")


def client_row(section: str, key: str, kafka_default: str,
               tuples: Mapping[str, tuple[Any, ...]] | None = None) -> tuple[str, str, str, str]:
    """(key, 0.8.2 default, default here, what it does here) of one client key."""
    tuples = client_key_tuples() if tuples is None else tuples
    for name in _search_order(section, tuples):
        for k in tuples[name]:
            if key != k.name and key not in k.aliases:
                continue
            alias = f" (as `{k.name}`)" if key != k.name else ""
            default = "required" if k.default is getattr(client_config, "_UNSET", object()) else _ours(k.default)
            no_effect = k.doc.lower().startswith(("accepted, no effect", "not used"))
            verdict = ("accepted, no effect" if no_effect else
                       "honoured, another default" if _differs(kafka_default, k.default) else "honoured")
            doc = re.sub(r"^accepted, no effect( here)?: ", "", k.doc)
            return key, kafka_default, default, f"{verdict}{alias} [{_label(name)}]: {doc}"
    return key, kafka_default, "-", "not accepted yet: the client refuses it as an unknown key"


def _table(rows: Iterable[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        first, *rest = row
        out.append(f"| `{first}` | " + " | ".join(_cell(c) for c in rest) + " |")
    return out


def render_table(seed_keys: Mapping[str, list[tuple[str, str]]]) -> str:
    """The Markdown README holds between START and END."""
    tuples = client_key_tuples()
    header = ("key", "0.8.2 default", "default here", "here")
    lines = ["Generated by `python -m appliance.cli.config_table` from `appliance/config.py` and",
             "`appliance/client/config.py`; do not edit by hand.", ""]
    for sid, _, title in SECTIONS:
        lines += [f"**{title}**", ""]
        pairs = seed_keys.get(sid, [])
        rows = [broker_row(k, d) if sid == "broker" else client_row(sid, k, d, tuples) for k, d in pairs]
        lines += _table(rows, header) + [""]
    in_082 = {k for k, _ in seed_keys.get("broker", [])}
    rest = [(k.name, _ours(k.default), _extra_effect(k)) for k in broker_config.BROKER_KEYS
            if k.name not in in_082]
    rest += [(name, "-", f"accepted, no effect: {why}")
             for name, why in broker_config.KAFKA_ONLY_KEYS.items() if name not in in_082]
    lines += ["**Broker keys beyond the 0.8.2 table** (later Kafka's, and ours)", ""]
    lines += _table(rest, ("key", "default here", "here"))
    return "\n".join(lines)


def _extra_effect(k: Any) -> str:
    if k.name in broker_config.NO_EFFECT:
        return f"accepted, no effect: {broker_config.NO_EFFECT[k.name]}"
    return f"ours: {k.doc.removeprefix('Ours: ')}" if k.ours else k.doc


def replace_table(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced. Raises ValueError without them."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md lacks the markers {START} ... {END}")
    return readme[:start + len(START)] + "\n" + table + "\n" + readme[end:]


def main(argv: list[str] | None = None) -> int:
    """Rewrite README.md's table (``--check``: only say whether it is current; 1 if not)."""
    argv = sys.argv[1:] if argv is None else argv
    readme = README.read_text()
    fresh = replace_table(readme, render_table(parse_vendored(VENDORED.read_text())))
    if "--check" in argv:
        if fresh != readme:
            print("README.md's config table is stale: run python -m appliance.cli.config_table")
            return 1
        return 0
    if fresh != readme:
        README.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
