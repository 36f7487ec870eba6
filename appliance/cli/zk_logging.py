"""The ZooKeeper tools' log level: kazoo's connection chatter and the consumer's INFO lines
(registrations, rebalances) are not for a console user; ``--verbose`` shows them."""

from __future__ import annotations

import argparse
import logging

__all__ = ["quiet_zookeeper_logs"]


def quiet_zookeeper_logs(args: argparse.Namespace) -> None:
    if not getattr(args, "verbose", False):
        logging.getLogger("kazoo").setLevel(logging.ERROR)
        logging.getLogger("appliance.client.zk_consumer").setLevel(logging.WARNING)
