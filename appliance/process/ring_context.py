"""What code in a ring client process is handed (a network worker's handlers, the cluster
worker's replica fetcher, ISR upkeep and config changes): the configuration, the shared
partition table and an index of it, the ring client to the disk workers and its wake-ups."""

from __future__ import annotations

from appliance.config import BrokerConfig
from appliance.process.disk_client import DiskClient
from appliance.process.wakeups import Wakeups
from appliance.shm.partition_index import PartitionIndex
from appliance.shm.partition_table import PartitionTable

__all__ = ["RingContext"]


class RingContext:
    def __init__(self, ring_index: int, config: BrokerConfig, table: PartitionTable,
                 disks: DiskClient, log_dirs: list[str]) -> None:
        self.net_index = ring_index  # this process's rings: a network worker's index, or num_net
        self.config = config
        self.table = table
        self.disks = disks
        self.index = PartitionIndex(table)
        self.wakeups = Wakeups(disks)
        self.log_dirs = log_dirs
        self.broker_id = int(config["broker.id"])

    def close(self) -> None:
        self.disks.close()
