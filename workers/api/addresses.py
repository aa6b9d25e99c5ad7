"""The address check for fetchers that do not connect through :class:`~workers.api.safety.SafeConnector`
(any other HTTP client): before a job is handed over, its host is resolved and the job is
declined (error ``blocked_address``) when every address is one the worker may not reach.

A check before the connection leaves a gap (the client resolves again, and a hostile DNS server
may answer differently the second time): a fetcher that must close it connects to one of
``job.addresses`` (the allowed addresses found here) or uses ``SafeConnector`` with aiohttp.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Protocol
from urllib.parse import urlsplit

from frontier.core.lru import LRU, TtlCache
from workers.api.clock import SYSTEM
from workers.api.safety import AddressPolicy

TTL = 300.0  # seconds a resolution is reused (as the built-in fetcher's DNS cache)
CACHED_HOSTS = 10_000
RESOLVE_TIMEOUT = 5.0


SAID_HOSTS = 1000  # hosts whose blocked addresses were said in the log (each once)
_said: LRU[str, None] = LRU(SAID_HOSTS)


def say_blocked(log: logging.Logger, host: str, addresses: Iterable[str] = ()) -> None:
    """A WARNING, once per host, that its jobs end as ``blocked_address`` and how to allow a local
    test site: the error page alone is easy to miss (a spider just gets no item)."""
    if host in _said:
        return
    _said.put(host, None)
    found = ", ".join(list(addresses)[:4])
    log.warning("%s resolves only to addresses this worker may not reach%s (private, loopback, link-local...): "
                "its URLs end as error pages 'blocked_address'. For a local test site allow its network in the "
                "configuration: [worker] allow_networks = [\"127.0.0.0/8\"]", host,
                f" ({found})" if found else "")  # fmt: skip


class HasAddresses(Protocol):
    addresses: list[str]


class AddressCheck:
    """Resolves a job's host and judges its addresses; resolutions reused ``TTL`` seconds of ``clock``
    (monotonic)."""

    def __init__(
        self, allow: Iterable[str] = (), block_private: bool = True, clock: Callable[[], float] = SYSTEM.monotonic
    ) -> None:
        self._clock = clock
        self.policy = AddressPolicy(allow, block_private)
        self._cache: TtlCache[tuple[str, int], list[str]] = TtlCache(CACHED_HOSTS)

    async def blocked(self, url: str, job: HasAddresses) -> bool:
        """True when ``url``'s host resolves only to blocked addresses; ``job.addresses`` gets the
        allowed ones. A host that does not resolve is not blocked here (its fetch fails on its own)."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        found = await self.resolve(host, port)
        job.addresses = [a for a in found if self.policy.allowed(a)]
        return bool(found) and not job.addresses

    async def resolve(self, host: str, port: int) -> list[str]:
        try:
            return [str(ipaddress.ip_address(host.strip("[]")))]  # a literal: nothing to resolve
        except ValueError:
            pass
        key = (host, port)
        hit = self._cache.get(key, self._clock())
        if hit is not None:
            return hit
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT)
        except (OSError, TimeoutError, UnicodeError):
            return []
        found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        self._cache.put(key, found, self._clock() + TTL)
        return found
