"""Imports run one way: every package has a layer (:data:`LAYERS`, the order docs/architecture.md
states), a module imports only from its own package or from a lower layer, never from a peer of
its layer (the network side ``broker`` and ``cluster`` do not import each other), and no module
of ``appliance`` takes part in an import cycle. Imports made inside functions count (lazy imports
hide dependencies, they do not remove them), and so, for the layers, do ``if TYPE_CHECKING:``
ones. Read from the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the packages from the bottom up; one entry per layer (peers share a layer)
LAYERS = (
    ("native", "appliance.errors", "appliance"),
    ("appliance.protocol", "appliance.records", "appliance.shm"),
    ("appliance.config", "appliance.coordinator"),
    ("appliance.storage", "appliance.security"),
    ("appliance.dynamic_config",),
    ("appliance.process", "appliance.metrics", "appliance.client"),
    ("appliance.broker", "appliance.cluster"),
    ("appliance.supervisor", "spark"),
    ("appliance.cli",),
)


def _modules() -> dict[str, Path]:
    found = {}
    for top in ("appliance", "native", "spark"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _target(name: str) -> str | None:
    """The module of ours that ``name`` (a module, or a name inside one) resolves to."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking_guard(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path, typing_too: bool = False) -> set[str]:
    """Every module of ours that ``module`` imports, at any depth of its code (``typing_too``:
    with those under ``if TYPE_CHECKING:``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    # ``if TYPE_CHECKING:`` imports never run: they are annotations, not dependencies
    typing_only = set() if typing_too else {
        id(n) for guard in ast.walk(tree) if _is_type_checking_guard(guard)
        for stmt in guard.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` mod
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = _target(name)
            if target is not None and target != module:
                out.add(target)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}
TYPED_GRAPH = {m: _imports(m, p, typing_too=True) for m, p in MODULES.items()}


def _package(module: str) -> str:
    """The entry of LAYERS ``module`` belongs to (its longest matching prefix)."""
    best = ""
    for layer in LAYERS:
        for p in layer:
            if (module == p or module.startswith(p + ".")) and len(p) > len(best):
                best = p
    return best


RANK = {p: i for i, layer in enumerate(LAYERS) for p in layer}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_is_read():
    # guards against a walker that finds nothing (and so could never fail)
    assert "appliance.broker.handlers.produce" in MODULES
    assert "appliance.shm.layout" in GRAPH["appliance.process.disk_client"]


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if not _package(m)]
    assert {top.split(".")[1] for top in MODULES if top.count(".") >= 1 and top.startswith("appliance.")} \
        <= {p.split(".")[1] for layer in LAYERS for p in layer if p.count(".") == 1}


def _wrong_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for m, targets in graph.items():
        mine = _package(m)
        for t in targets:
            theirs = _package(t)
            if theirs != mine and RANK[theirs] >= RANK[mine]:
                how = "a peer" if RANK[theirs] == RANK[mine] else "a higher layer"
                wrong.append(f"{m} imports {t} ({how}: {mine} -> {theirs})")
    return sorted(wrong)


def test_imports_only_go_down_the_layers():
    wrong = _wrong_imports(TYPED_GRAPH)
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_finds_an_import_up_and_one_between_peers():
    graph = {"appliance.storage.log": {"appliance.broker.disk.worker"},
             "appliance.broker.network_worker": {"appliance.cluster.worker"},
             "appliance.broker.disk.worker": {"appliance.storage.log", "appliance.broker.topic_admin"}}
    assert _wrong_imports(graph) == [
        "appliance.broker.network_worker imports appliance.cluster.worker (a peer: appliance.broker -> appliance.cluster)",
        "appliance.storage.log imports appliance.broker.disk.worker (a higher layer: appliance.storage -> appliance.broker)"]


def test_no_import_cycles():
    ours = {m: {t for t in targets if t.startswith("appliance")}
            for m, targets in TYPED_GRAPH.items() if m.startswith("appliance")}
    cycles = _cycles(ours)
    assert not cycles, "import cycles among: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
