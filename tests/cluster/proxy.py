"""A userspace TCP proxy for the cluster harness: the kernel here has no ``sch_netem``, so the
latency, jitter and loss of a link come from this program, between a server's public address and
the server itself.

It reads a JSON control file (``--control``) and re-reads it whenever it changes (every 0.1 s)::

    {"routes": [{"listen": "198.18.0.11:9092", "target": "127.0.0.1:9092"}],
     "links": {"default": {"delay": 0.05, "jitter": 0.02, "drop": 0.01},
               "198.18.0.21": {"pause": true}}}

A link is the traffic from one client address (``default``: any other). Per link:

- ``delay`` / ``jitter`` (seconds): each chunk, both ways, is forwarded ``delay`` ± ``jitter``
  later (uniformly; never reordered within a connection);
- ``drop`` (0..1): the share of new connections reset at once (a TCP RST);
- ``stall`` (0..1): the share of new connections accepted and never answered (until closed);
- ``pause`` (bool): nothing is forwarded, either way, until it is false again (a loss burst: the
  peers see a silent link; TCP keeps the bytes);
- ``reset`` (int): raise it to reset every open connection of the link once.

Routes are read at start only. Every byte stays between the listen and target addresses given.

With ``--stalls FILE``, the proxy's own stalls (its event loop waking up more than 10 ms late) are
appended to FILE, one ``epoch-seconds duration`` line each: a request that reaches the proxy in a
stall is forwarded late, so its site stamps it late and the gap after it looks shorter than the
client made it (a starved test machine, not an impolite client).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHUNK = 65536
STALL_TICK = 0.005  # seconds between two looks at the proxy's event loop
STALL_MIN = 0.01  # a loop that wakes up this much later than asked is recorded as stalled


@dataclass
class Link:
    delay: float = 0.0
    jitter: float = 0.0
    drop: float = 0.0
    stall: float = 0.0
    pause: bool = False
    reset: int = 0

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Link:
        known = {k: raw[k] for k in ("delay", "jitter", "drop", "stall", "pause", "reset") if k in raw}
        return cls(**known)


@dataclass
class Control:
    path: Path
    links: dict[str, Link] = field(default_factory=dict)
    mtime: float = -1.0
    routes: list[tuple[str, int, str, int]] = field(default_factory=list)
    resumed: asyncio.Event = field(default_factory=asyncio.Event)

    def link(self, client: str) -> Link:
        return self.links.get(client) or self.links.get("default") or Link()

    def load(self) -> bool:
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime == self.mtime:
                return False
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return False  # being replaced, or not there yet: the last good one stands
        self.mtime = mtime
        self.links = {k: Link.of(v) for k, v in data.get("links", {}).items()}
        if not self.routes:
            for r in data.get("routes", []):
                lh, lp = r["listen"].rsplit(":", 1)
                th, tp = r["target"].rsplit(":", 1)
                self.routes.append((lh, int(lp), th, int(tp)))
        self.resumed.set()  # anything paused looks again
        self.resumed = asyncio.Event()
        return True


class Proxy:
    def __init__(self, control: Control, stalls: Path | None = None) -> None:
        self.control = control
        self.stalls = stalls
        self._watcher: asyncio.Future[None] | None = None
        self.open: dict[str, set[asyncio.StreamWriter]] = {}  # by client address
        self.resets: dict[str, int] = {}

    async def serve(self) -> None:
        self.control.load()
        servers = []
        for lh, lp, th, tp in self.control.routes:
            servers.append(await asyncio.start_server(self._handler(th, tp), lh, lp, reuse_address=True))
        if self.stalls is not None:
            self._watcher = asyncio.ensure_future(self._watch(self.stalls))  # kept: runs until the process ends
        print(f"proxy ready: {len(servers)} routes", flush=True)
        while True:
            await asyncio.sleep(0.1)
            if self.control.load():
                self._apply_resets()

    @staticmethod
    async def _watch(path: Path) -> None:
        with path.open("a") as out:
            while True:
                t = time.time()
                await asyncio.sleep(STALL_TICK)
                late = time.time() - t - STALL_TICK
                if late > STALL_MIN:
                    out.write(f"{t:.4f} {late:.4f}\n")
                    out.flush()

    def _apply_resets(self) -> None:
        for client, writers in self.open.items():
            want = self.control.link(client).reset
            if want != self.resets.get(client, want):
                for w in list(writers):
                    _rst(w)
            self.resets[client] = want

    def _handler(self, host: str, port: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            client = writer.get_extra_info("peername")[0]
            link = self.control.link(client)
            self.resets.setdefault(client, link.reset)
            roll = random.random()
            if roll < link.drop:
                _rst(writer)
                return
            if roll < link.drop + link.stall:
                with contextlib.suppress(Exception):
                    await reader.read()  # held open, never answered, until the client gives up
                writer.close()
                return
            try:
                up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
            except (OSError, TimeoutError):
                _rst(writer)
                return
            mine = self.open.setdefault(client, set())
            mine.add(writer)
            try:
                await asyncio.gather(self._pipe(reader, up_w, client), self._pipe(up_r, writer, client))
            finally:
                mine.discard(writer)
                for w in (writer, up_w):
                    with contextlib.suppress(Exception):
                        w.close()

        return handle

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer, client))
        last = 0.0
        try:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                link = self.control.link(client)
                due = max(last, time.monotonic() + max(0.0, link.delay + random.uniform(-link.jitter, link.jitter)))
                last = due
                await queue.put((due, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()

    async def _send(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, client: str) -> None:
        while True:
            due, data = await queue.get()
            while self.control.link(client).pause:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.control.resumed.wait(), 0.2)
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                with contextlib.suppress(Exception):
                    writer.write_eof()
                return
            try:
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                return


def _rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", required=True, type=Path, help="the JSON control file")
    parser.add_argument("--stalls", type=Path, help="append the proxy's own stalls to this file")
    args = parser.parse_args()
    asyncio.run(Proxy(Control(args.control), args.stalls).serve())


if __name__ == "__main__":
    main()
