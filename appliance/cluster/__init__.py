"""Cluster mode: the ZooKeeper registry, the controller, and the replication bookkeeping.

Nothing here is imported in standalone mode (empty ``zookeeper.connect``): the package pulls in
kazoo, which starts threads, and only the cluster worker process may hold those. Import the
submodules directly (``appliance.cluster.controller`` ...); this ``__init__`` imports nothing.
"""

__all__: list[str] = []
