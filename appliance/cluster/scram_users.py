"""DescribeUserScramCredentials and AlterUserScramCredentials in a cluster: the credentials
live in ZooKeeper under ``/config/users/<user>`` (Kafka's layout; each broker's config-change
listener mirrors them into the file its network workers authenticate against). The checks and
answers are :mod:`appliance.security.scram_admin`'s; only the store differs from a standalone
broker's."""

from __future__ import annotations

import asyncio
from typing import Any

from appliance.cluster.zk_store import ZkStore
from appliance.security.credentials import SCRAM_MECHANISMS
from appliance.security.scram_admin import alter_body, describe_body

__all__ = ["describe_scram_body", "alter_scram_body"]


def _scram(config: dict[str, str]) -> dict[str, str]:
    return {m: c for m, c in config.items() if m in SCRAM_MECHANISMS}


async def describe_scram_body(store: ZkStore, request: Any) -> dict:
    def read() -> dict:
        wanted = None if request.users is None else [u.name for u in request.users]
        names = store.user_names() if wanted is None else wanted
        users = {n: c for n in set(names) if (c := _scram(store.user_config(n)))}
        return describe_body(users, wanted)
    return await asyncio.get_running_loop().run_in_executor(None, read)


async def alter_scram_body(store: ZkStore, request: Any) -> dict:
    def write(name: str, creds: dict[str, str]) -> None:
        other = {k: v for k, v in store.user_config(name).items() if k not in SCRAM_MECHANISMS}
        store.set_user_config(name, {**other, **creds})

    def run() -> dict:
        return alter_body(request, lambda n: _scram(store.user_config(n)), write)
    return await asyncio.get_running_loop().run_in_executor(None, run)
