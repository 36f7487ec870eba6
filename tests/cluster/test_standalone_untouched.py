"""Standalone mode stays as it was: no module a standalone broker or its tools load pulls in the
cluster package, the inter-broker schemas, or kazoo (whose threads must never exist in a process
that forks). The ZooKeeper clients themselves (the 0.8 ZooKeeper consumer and the tools that
exist to talk to ZooKeeper) are left out of the walk: they are loaded only by the command that
uses them."""

import subprocess
import sys

CHECK = r"""
import importlib, pkgutil, sys
import appliance
skipped = ("appliance.cluster", "appliance.protocol.messages.cluster")
zookeeper_clients = ("appliance.client.zk_consumer", "appliance.cli.consumer_offset_checker",
                     "appliance.cli.zk_console", "appliance.cli.zookeeper_tool")
def walk(pkg):
    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
        if info.name.startswith(skipped + zookeeper_clients):
            continue  # (walk_packages would import these packages just to list them)
        mod = importlib.import_module(info.name)
        if info.ispkg:
            walk(mod)
walk(appliance)
bad = sorted(m for m in sys.modules if m == "kazoo" or m.startswith(("kazoo.",) + skipped))
print("LOADED", bad)
"""


def test_no_standalone_module_imports_the_cluster_or_kazoo():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "LOADED []" in out.stdout, out.stdout
