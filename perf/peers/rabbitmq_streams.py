"""RabbitMQ Streams: rabbitmq-server (rabbitmq_stream plugin) started in the foreground with every
RABBITMQ_* path in a temp dir, its own node name, AMQP/distribution/stream ports and a private
epmd on a free port, so it collides with nothing on the host.

Clients: rstream (asyncio). Produce: send_batch of 1,000 messages, timed until every publish is
confirmed. Consume: a subscriber from the first offset with credit 100 (chunks in flight), timed
until the last message. Latency: send_batch of the records due at each tick (no client-side
batching delay); the receiver subscribes from the first offset of a fresh stream.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

from perf.peers.base import Peer, PeerUnavailable, ServerProcess, free_port, wait_port
from perf.peers.redis_streams import python_share
from perf.workloads.latency import Collector, run_latency_async
from perf.workloads.spec import Workload

__all__ = ["RabbitMQStreams"]

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
BATCH = 1000
AUTH = {"username": "guest", "password": "guest"}


class RabbitMQStreams(Peer):
    name = "RabbitMQ Streams"

    def __init__(self) -> None:
        self.server: ServerProcess | None = None
        self.epmd: ServerProcess | None = None
        self._n = 0
        self._preloaded: dict[str, str] = {}

    def start(self, workdir: Path) -> None:
        epmd = shutil.which("epmd") or next(iter(glob.glob("/usr/lib/erlang/erts-*/bin/epmd")), None)
        if not os.path.exists(SERVER) or not epmd:
            raise PeerUnavailable("rabbitmq-server not installed (run perf/setup_peers.sh)")
        try:
            import rstream  # noqa: F401
        except ImportError as e:
            raise PeerUnavailable(f"rstream missing: {e}") from e
        base = workdir / "rabbitmq"
        (base / "home").mkdir(parents=True)
        (base / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        epmd_port, amqp, dist, self.port = free_port(), free_port(), free_port(), free_port()
        env = {**os.environ, "HOME": str(base / "home"), "ERL_EPMD_PORT": str(epmd_port),
               "RABBITMQ_NODENAME": f"perf{self.port}@localhost",
               "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(amqp),
               "RABBITMQ_DIST_PORT": str(dist), "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
               "RABBITMQ_LOG_BASE": str(base / "log"), "RABBITMQ_LOGS": "-",
               "RABBITMQ_PID_FILE": str(base / "pid"),
               "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
               "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                   f'-rabbitmq_stream tcp_listeners [{{"127.0.0.1",{self.port}}}]'}
        # A private epmd in the foreground (-port) so it is ours to stop; rabbitmq finds it by env.
        self.epmd = ServerProcess([epmd, "-port", str(epmd_port)], workdir / "epmd.log", env=env)
        time.sleep(0.2)
        self.server = ServerProcess([SERVER], workdir / "rabbitmq.log", env=env, cwd=base)
        wait_port(self.port, self.server.proc, 120, self.server.log)
        try:
            self.version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
                                          capture_output=True, text=True, timeout=10).stdout
        except OSError:
            self.version = "?"

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.server.stop(30)
        finally:
            self.server = None
            if self.epmd is not None:
                self.epmd.stop(5)
                self.epmd = None

    def describe(self) -> str:
        return f"rabbitmq-server {getattr(self, 'version', '?')} + rabbitmq_stream, rstream client"

    def clients(self, wl: Workload) -> list[str]:
        if wl.kind == "produce" and wl.partitions == 1 and wl.acks == 1:
            return ["rstream"]
        if wl.kind in ("consume", "latency"):
            return ["rstream"]
        return []

    def skip_reason(self, wl: Workload) -> str:
        if wl.partitions > 1:
            return "1,000 streams (one Osiris log and process each) are not set up here"
        if wl.acks != 1:
            return "publish confirms are already its only mode (same as produce_100B)"
        return "measured on the appliance only"

    def run(self, wl: Workload, client: str, run: int) -> dict:
        return asyncio.run(self._run(wl))

    def finish_workload(self, wl: Workload) -> None:
        name = self._preloaded.pop(wl.name, None)
        if name:
            asyncio.run(self._delete(name))

    async def _producer(self):
        from rstream import Producer
        p = Producer("127.0.0.1", self.port, **AUTH)
        await p.start()
        return p

    async def _delete(self, name: str) -> None:
        p = await self._producer()
        try:
            await p.delete_stream(name)
        finally:
            await p.close()

    def _name(self) -> str:
        self._n += 1
        return f"s{self._n}"

    async def _produce(self, name: str, n: int, size: int) -> float:
        p = await self._producer()
        try:
            await p.create_stream(name, exists_ok=True)
            value = os.urandom(size)
            batch = [value] * BATCH
            confirmed = [0]
            done = asyncio.Event()

            def on_confirm(status) -> None:
                confirmed[0] += 1
                if confirmed[0] >= n:
                    done.set()

            t0 = time.perf_counter()
            sent = 0
            while sent < n:
                m = min(BATCH, n - sent)
                await p.send_batch(name, batch[:m], on_publish_confirm=on_confirm)
                sent += m
            await asyncio.wait_for(done.wait(), 600)
            return n / (time.perf_counter() - t0)
        finally:
            await p.close()

    async def _run(self, wl: Workload) -> dict:
        if wl.kind == "produce":
            name = self._name()
            try:
                n = python_share(wl.records)
                return {"rps": await self._produce(name, n, wl.value_size), "records": n}
            finally:
                await self._delete(name)
        if wl.kind == "consume":
            if wl.name not in self._preloaded:
                name = self._name()
                await self._produce(name, python_share(wl.records), wl.value_size)
                self._preloaded[wl.name] = name
            n = python_share(wl.records)
            return {"rps": await self._consume(self._preloaded[wl.name], n), "records": n}
        if wl.kind == "latency":
            name = self._name()
            p = await self._producer()
            try:
                await p.create_stream(name, exists_ok=True)

                async def send(v: bytes) -> None:
                    await p.send_batch(name, [v])

                async def flush() -> None:
                    return None

                return await run_latency_async(latency_receiver, {"port": self.port, "stream": name},
                                               send, flush, wl)
            finally:
                await p.close()
                await self._delete(name)
        raise ValueError(wl.kind)

    async def _consume(self, name: str, n: int) -> float:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType
        got = [0]
        done = asyncio.Event()

        async def on_message(msg, ctx) -> None:
            got[0] += 1
            if got[0] == n:
                done.set()

        c = Consumer("127.0.0.1", self.port, **AUTH)
        await c.start()
        try:
            t0 = time.perf_counter()
            await c.subscribe(name, on_message, initial_credit=100,
                              offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
            await asyncio.wait_for(done.wait(), 600)
            return n / (time.perf_counter() - t0)
        finally:
            await c.close()


def latency_receiver(args: dict, ready, out, total: int, timeout_s: float) -> None:
    async def main() -> None:
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType
        col = Collector(total)
        done = asyncio.Event()
        now = time.monotonic_ns

        async def on_message(msg, ctx) -> None:
            col.add(bytes(msg), now())
            if col.done:
                done.set()

        c = Consumer("127.0.0.1", args["port"], **AUTH)
        await c.start()
        await c.subscribe(args["stream"], on_message, initial_credit=100,
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST))
        ready.set()
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        except TimeoutError:
            pass
        await c.close()
        out.put(col.result())

    asyncio.run(main())
