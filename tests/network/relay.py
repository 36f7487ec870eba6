"""A delaying TCP relay (asyncio), for the delay this kernel cannot add to packets (no netem).

Run inside a broker's host (``python -m tests.network.relay --listen ADDR:PORT --to
ADDR:PORT``), it accepts connections and forwards each to the broker's inter-broker listener,
holding every chunk read, in both directions, for the current delay plus a uniform jitter
(never reordering a connection's bytes: a chunk is not sent before the one read ahead of it).
The broker advertises the relay's port for that listener, so every replica fetch and controller
request towards it goes through the relay. Commands on stdin, one a line: ``delay <ms>
<jitter_ms>`` (``delay 0 0`` is a plain copy). Prints ``listening`` once it accepts."""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import threading
import time

__all__ = ["main"]


class _Settings:
    delay_s = 0.0
    jitter_s = 0.0

    def hold(self) -> float:
        return max(0.0, self.delay_s + random.uniform(-self.jitter_s, self.jitter_s))


SETTINGS = _Settings()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    queue: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass

    sender = asyncio.ensure_future(send())
    last_due = 0.0
    try:
        while data := await reader.read(65536):
            last_due = max(time.monotonic() + SETTINGS.hold(), last_due)
            await queue.put((last_due, data))
    except (ConnectionError, OSError):
        pass
    await queue.put(None)
    await sender


async def _serve(listen: tuple[str, int], to: tuple[str, int]) -> None:
    async def handle(r1: asyncio.StreamReader, w1: asyncio.StreamWriter) -> None:
        try:
            r2, w2 = await asyncio.open_connection(*to)
        except OSError:
            w1.close()
            return
        await asyncio.gather(_pipe(r1, w2), _pipe(r2, w1))
        for w in (w1, w2):
            w.close()

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


def _commands() -> None:
    for line in sys.stdin:
        f = line.split()
        if len(f) == 3 and f[0] == "delay":
            SETTINGS.delay_s, SETTINGS.jitter_s = float(f[1]) / 1000, float(f[2]) / 1000


def _addr(s: str) -> tuple[str, int]:
    host, port = s.rsplit(":", 1)
    return host, int(port)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    args = ap.parse_args()
    threading.Thread(target=_commands, daemon=True).start()
    asyncio.run(_serve(_addr(args.listen), _addr(args.to)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
