"""The 0.8.2 documentation's config key lists: extracted from its text, and the vendored copy.

The seeds' ``kafka-0.8.2-documentation.zh.txt`` lists every broker (3.1), consumer (3.2),
producer (3.3) and new-producer (3.4) key with its default in Markdown-like tables.
:func:`extract_seed_keys` reads them (expanding ``log.roll.{ms,hours}``); since the seeds may not
be beside a checkout, the result is vendored in ``docs/kafka-0.8.2-config-keys.txt``
(:func:`render_vendored` / :func:`parse_vendored`); ``python -m appliance.cli.seed_keys``
compares the two where the seeds are (the tests check the extractor on an excerpt of their
format, so they run anywhere). :mod:`appliance.cli.config_table` renders README's table from it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SECTIONS", "VENDORED", "extract_seed_keys", "render_vendored", "parse_vendored"]

VENDORED = Path(__file__).resolve().parents[2] / "docs" / "kafka-0.8.2-config-keys.txt"

# (section id, the documentation's heading, README's heading)
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("broker", "3.1 Broker Configs", "Broker (0.8.2 section 3.1)"),
    ("consumer", "3.2 Consumer Configs", "Consumer (0.8.2 section 3.2: the ZooKeeper consumer)"),
    ("producer", "3.3 Producer Configs", "Producer (0.8.2 section 3.3: the old producer)"),
    ("new producer", "3.4 New Producer Configs", "New producer (0.8.2 section 3.4)"),
)
# what ends the last table of a section: the topic-level table follows the broker's
_SECTION_END = ("Topic级别的配置", "4. Design")
_ROW = re.compile(r"([a-z][\w.]*(?:\.\{[\w,]+\})?) \| (.*)")


def _expand(name: str) -> list[str]:
    """``log.roll.{ms,hours}`` -> log.roll.ms, log.roll.hours (the documentation's shorthand)."""
    m = re.fullmatch(r"(.*)\{([\w,]+)\}", name)
    return [m.group(1) + part for part in m.group(2).split(",")] if m else [name]


def extract_seed_keys(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each section's (key, 0.8.2 default) pairs, in the documentation's order, from the text
    of kafka-0.8.2-documentation.zh.txt. A key listed twice in a section is kept once."""
    headings = {h: sid for sid, h, _ in SECTIONS}
    out: dict[str, list[tuple[str, str]]] = {sid: [] for sid, _, _ in SECTIONS}
    section = None
    for line in text.splitlines():
        if line.strip() in headings:
            section = headings[line.strip()]
            continue
        if line.startswith(_SECTION_END):
            section = None
            continue
        m = _ROW.fullmatch(line.strip())
        if section is None or m is None:
            continue
        cells = [c.strip() for c in m.group(2).split(" | ")]
        # the new producer's table has a type column before the default
        default = cells[1] if section == "new producer" else cells[0]
        for key in _expand(m.group(1)):
            if key not in (k for k, _ in out[section]):
                out[section].append((key, default))
    return out


def render_vendored(keys: Mapping[str, list[tuple[str, str]]]) -> str:
    """The vendored file's text for ``keys`` (see :func:`extract_seed_keys`)."""
    lines = ["# The keys and defaults of the config tables of the Kafka 0.8.2 documentation, as",
             "# extracted from the seeds (../shared/seeds/kafka-0.8.2-documentation.zh.txt, sections",
             "# 3.1-3.4) by appliance.cli.seed_keys.extract_seed_keys; `python -m appliance.cli.seed_keys`",
             "# extracts them again and compares. key | 0.8.2 default"]
    for sid, _, _ in SECTIONS:
        lines.append(f"[{sid}]")
        lines.extend(f"{k} | {d}" for k, d in keys[sid])
    return "\n".join(lines) + "\n"


def parse_vendored(text: str) -> dict[str, list[tuple[str, str]]]:
    """The inverse of :func:`render_vendored`. Raises ValueError on a line it cannot read."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out[section] = []
        elif section is not None and " | " in line:
            key, default = line.split(" | ", 1)
            out[section].append((key.strip(), default.strip()))
        else:
            raise ValueError(f"cannot read {line!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m appliance.cli.seed_keys [SEEDS_FILE]``: compare the vendored list with the
    seeds (default: ../shared/seeds/kafka-0.8.2-documentation.zh.txt beside this checkout);
    ``--write`` rewrites the vendored list from them. Exit 1 when they differ."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    write = "--write" in args
    paths = [a for a in args if a != "--write"]
    seeds = Path(paths[0]) if paths else VENDORED.parents[2] / "shared" / "seeds" / "kafka-0.8.2-documentation.zh.txt"
    rendered = render_vendored(extract_seed_keys(seeds.read_text()))
    if write:
        VENDORED.write_text(rendered)
        return 0
    if rendered != VENDORED.read_text():
        print(f"{VENDORED} differs from what {seeds} holds; run with --write", file=sys.stderr)
        return 1
    print(f"{VENDORED} matches {seeds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
