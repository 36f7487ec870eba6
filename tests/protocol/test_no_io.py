"""The protocol package is sans-I/O: it must not import anything that touches sockets,
event loops, selectors, files or processes."""

from __future__ import annotations

import ast
from pathlib import Path

import appliance.protocol

FORBIDDEN = {"socket", "asyncio", "selectors", "select", "ssl", "io", "os", "pathlib", "mmap",
             "shutil", "tempfile", "subprocess", "threading", "multiprocessing", "trio", "anyio"}
FORBIDDEN_CALLS = {"open"}


def _modules() -> list[Path]:
    files = sorted(Path(appliance.protocol.__file__).parent.rglob("*.py"))
    assert len(files) >= 9
    return files


def test_no_io_imports():
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in FORBIDDEN_CALLS:
                offenders.append(f"{path.name}:{node.lineno} calls {node.func.id}()")
            offenders += [f"{path.name}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_the_check_would_catch_an_io_import(tmp_path):
    # guard against the test above silently passing on a broken walker
    tree = ast.parse("import socket\nfrom asyncio import sleep\n")
    found = [n for node in ast.walk(tree)
             for n in ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module] if isinstance(node, ast.ImportFrom) else [])
             if n.split(".")[0] in FORBIDDEN]
    assert found == ["socket", "asyncio"]
