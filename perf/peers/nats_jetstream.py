"""NATS JetStream: ``nats-server -js -sd <tmp> -p PORT`` (file storage), nats-py client.

Produce: publish_async (acknowledged publishes, up to 4,000 pending) timed until every PubAck is
in; pure-Python client, so records/10. 1,000 partitions = one stream over 1,000 subjects.
Consume: a pull consumer fetching batches of 1,000 (ack policy none) from the first message.
Latency: publish_async per record; the receiver is a push subscriber (ordered consumer).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path

from perf.peers.base import Peer, PeerUnavailable, ServerProcess, free_port, wait_port
from perf.workloads.latency import Collector, run_latency_async
from perf.workloads.spec import Workload

__all__ = ["NatsJetStream"]

SLOW_CLIENT_SHARE = 10
PENDING = 4000


class NatsJetStream(Peer):
    name = "NATS JetStream"

    def __init__(self) -> None:
        self.server: ServerProcess | None = None
        self._n = 0
        self._preloaded: dict[str, str] = {}

    def start(self, workdir: Path) -> None:
        exe = shutil.which("nats-server")
        if not exe:
            raise PeerUnavailable("nats-server not installed (run perf/setup_peers.sh)")
        try:
            import nats  # noqa: F401
        except ImportError as e:
            raise PeerUnavailable(f"nats-py missing: {e}") from e
        self.port = free_port()
        store = workdir / "nats"
        store.mkdir()
        self.server = ServerProcess([exe, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port),
                                     "-m", "0"], workdir / "nats.log")
        wait_port(self.port, self.server.proc, 30, self.server.log)
        self.version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def describe(self) -> str:
        return f"{getattr(self, 'version', 'nats-server')} -js (file store), nats-py client"

    def clients(self, wl: Workload) -> list[str]:
        if wl.kind == "produce" and wl.acks == 1:
            return ["nats-py"]
        if wl.kind in ("consume", "latency"):
            return ["nats-py"]
        return []

    def skip_reason(self, wl: Workload) -> str:
        if wl.acks != 1:
            return "PubAck after the store write is its only mode (same as produce_100B)"
        return "measured on the appliance only"

    def run(self, wl: Workload, client: str, run: int) -> dict:
        return asyncio.run(self._run(wl))

    def finish_workload(self, wl: Workload) -> None:
        name = self._preloaded.pop(wl.name, None)
        if name:
            asyncio.run(self._delete(name))

    async def _connect(self):
        import nats
        nc = await nats.connect(f"nats://127.0.0.1:{self.port}", max_reconnect_attempts=0,
                                pending_size=256 << 20)
        return nc, nc.jetstream(publish_async_max_pending=PENDING)

    async def _create(self, js, name: str, partitions: int) -> None:
        from nats.js.api import StorageType, StreamConfig
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.FILE,
                                         max_msg_size=-1))

    async def _delete(self, name: str) -> None:
        nc, js = await self._connect()
        try:
            await js.delete_stream(name)
        finally:
            await nc.close()

    def _name(self) -> str:
        self._n += 1
        return f"S{self._n}"

    async def _produce(self, name: str, n: int, size: int, partitions: int) -> float:
        nc, js = await self._connect()
        try:
            await self._create(js, name, partitions)
            value = os.urandom(size)
            subjects = [f"{name}.{i}" for i in range(partitions)]
            t0 = time.perf_counter()
            for i in range(n):
                await js.publish_async(subjects[i % partitions], value)
            await js.publish_async_completed()
            rate = n / (time.perf_counter() - t0)
            info = await js.stream_info(name)
            if info.state.messages != n:
                raise RuntimeError(f"stream holds {info.state.messages} of {n}")
            return rate
        finally:
            await nc.close()

    async def _run(self, wl: Workload) -> dict:
        # ~20,000 records/s through nats-py: a bounded share keeps the full run under an hour.
        n = max(20_000, min(wl.records // SLOW_CLIENT_SHARE, 200_000))
        if wl.kind == "produce":
            name = self._name()
            try:
                return {"rps": await self._produce(name, n, wl.value_size, wl.partitions), "records": n}
            finally:
                await self._delete(name)
        if wl.kind == "consume":
            if wl.name not in self._preloaded:
                name = self._name()
                await self._produce(name, n, wl.value_size, 1)
                self._preloaded[wl.name] = name
            return {"rps": await self._consume(self._preloaded[wl.name], n), "records": n}
        if wl.kind == "latency":
            name = self._name()
            nc, js = await self._connect()
            try:
                await self._create(js, name, 1)
                subject = f"{name}.0"

                async def send(v: bytes) -> None:
                    await js.publish_async(subject, v)

                async def flush() -> None:
                    await js.publish_async_completed()

                return await run_latency_async(latency_receiver, {"port": self.port, "subject": subject},
                                               send, flush, wl)
            finally:
                await nc.close()
                await self._delete(name)
        raise ValueError(wl.kind)

    async def _consume(self, name: str, n: int) -> float:
        from nats.js.api import AckPolicy, ConsumerConfig
        nc, js = await self._connect()
        try:
            t0 = time.perf_counter()
            sub = await js.pull_subscribe(f"{name}.>", stream=name,
                                          config=ConsumerConfig(ack_policy=AckPolicy.NONE))
            got = 0
            while got < n:
                got += len(await sub.fetch(1000, timeout=10))
            return n / (time.perf_counter() - t0)
        finally:
            await nc.close()


def latency_receiver(args: dict, ready, out, total: int, timeout_s: float) -> None:
    async def main() -> None:
        import nats
        nc = await nats.connect(f"nats://127.0.0.1:{args['port']}", max_reconnect_attempts=0)
        js = nc.jetstream()
        col = Collector(total)
        done = asyncio.Event()
        now = time.monotonic_ns

        async def on_msg(msg) -> None:
            col.add(msg.data, now())
            if col.done:
                done.set()

        await js.subscribe(args["subject"], cb=on_msg, ordered_consumer=True)
        ready.set()
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        except TimeoutError:
            pass
        await nc.close()
        out.put(col.result())

    asyncio.run(main())
