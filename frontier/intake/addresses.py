"""Host → address for the per-IP scope (``frontier.ip_scope``): hosts that resolve to one address
share one politeness scope ``ip:<address>``, as in BUbiNG and Heritrix.

Only the router uses this, and only with ``frontier.ip_scope = true``: it resolves the new hosts
of each batch it routes and keys their URLs by the address (``UrlItem.ip``, see
``topics.partitioning``), so every host on one server lands in one partition and shares one
scope state there.

- **One address per host**: IPv4 before IPv6, then the lowest (:func:`preferred`); round-robin
  DNS rotates the order of its answers, not their set, so the choice is stable. An IPv4-mapped
  IPv6 address counts as its IPv4 address. An IP literal is its own address (no lookup).
- **Bounded in time**: a batch's unknown hosts are looked up concurrently (a pool of
  :data:`THREADS` threads), and the batch waits at most :data:`BATCH_TIMEOUT` seconds for them
  all. A host not resolved by then, or that does not resolve, gets no address: its URL is keyed
  by its registrable domain as with ``ip_scope = false`` (the worker reports the DNS error as
  usual). A lookup still running goes on and fills the cache for the next batch; at most
  :data:`MAX_PENDING` lookups are in flight, beyond that new hosts get no address.
- **Bounded in memory**: answers are cached :data:`TTL` seconds (failures
  :data:`NEGATIVE_TTL`), at most :data:`MAX_HOSTS` hosts, least recently used out first
  (:class:`frontier.core.lru.TtlCache`, pure: time is passed in; the workers' address check
  caches its answers in one too).

The lookup is injectable (unit tests resolve from a table); the default is the system resolver
(``getaddrinfo``), so ``/etc/hosts`` and the local resolver's caching apply.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial

from frontier.core.lru import TtlCache

log = logging.getLogger(__name__)

MAX_HOSTS = 100_000  # cached host → address answers, least recently used out first
TTL = 600.0  # seconds an answer is reused (getaddrinfo does not tell the record's TTL)
NEGATIVE_TTL = 60.0  # seconds a failed lookup is remembered
BATCH_TIMEOUT = 5.0  # seconds a routed batch waits for its hosts' lookups, at most
THREADS = 16  # concurrent lookups
MAX_PENDING = 10_000  # lookups in flight (or waiting for a thread), at most

Lookup = Callable[[str], Sequence[str]]  # host → its addresses; OSError when it does not resolve


def system_lookup(host: str) -> list[str]:
    """The host's addresses from the system resolver (``getaddrinfo``)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def ip_literal(host: str) -> str:
    """The address a host names literally (``127.0.0.1``, ``::1``), or "" for a name."""
    ip = _address(host.strip("[]"))
    return "" if ip is None else ip.compressed


def preferred(addresses: Iterable[str]) -> str:
    """The one address that stands for a server: IPv4 before IPv6, then the lowest; "" if none."""
    ips = [ip for ip in map(_address, addresses) if ip is not None]
    v4 = [ip for ip in ips if isinstance(ip, ipaddress.IPv4Address)]
    v6 = [ip for ip in ips if isinstance(ip, ipaddress.IPv6Address)]
    if v4:
        return min(v4).compressed
    return min(v6).compressed if v6 else ""


class Resolver:
    """Resolves the hosts of a routed batch to one address each (see the module docstring)."""

    def __init__(
        self,
        lookup: Lookup = system_lookup,
        *,
        max_hosts: int = MAX_HOSTS,
        ttl: float = TTL,
        negative_ttl: float = NEGATIVE_TTL,
        timeout: float = BATCH_TIMEOUT,
        threads: int = THREADS,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self._cache: TtlCache[str, str] = TtlCache(max_hosts)
        self._ttl, self._negative_ttl = ttl, negative_ttl
        self._timeout = timeout
        self._max_pending = max_pending
        self._clock = clock
        # the cache and the pending map (lookups finish on pool threads; reentrant: a lookup that is
        # already done when its callback is added runs the callback at once, in this thread)
        self._lock = threading.RLock()
        self._pending: dict[str, Future[str]] = {}
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="resolve")
        self.lookups = 0  # lookups started (cache misses), for tests and logs
        self.unresolved = 0  # hosts routed without an address (failed, timed out, or over MAX_PENDING)

    def addresses(self, hosts: Iterable[str]) -> dict[str, str]:
        """Each host's address, "" for a host without one (in at most the batch timeout)."""
        out: dict[str, str] = {}
        waiting: dict[str, Future[str]] = {}
        with self._lock:
            now = self._clock()
            for host in set(hosts):
                literal = ip_literal(host)
                cached = literal or self._cache.get(host, now)
                if cached is not None:
                    out[host] = cached
                    continue
                future = self._pending.get(host)
                if future is None:
                    if len(self._pending) >= self._max_pending:
                        out[host] = ""
                        self.unresolved += 1
                        continue
                    future = self._pending[host] = self._pool.submit(self._resolve, host)
                    self.lookups += 1
                    future.add_done_callback(partial(self._store, host))
                waiting[host] = future
        if waiting:
            wait(waiting.values(), timeout=self._timeout)
        for host, future in waiting.items():
            address = ""
            if future.done():
                self._store(host, future)  # now, not when the pool thread gets to its callback
                address = "" if future.cancelled() or future.exception() is not None else future.result()
            if not address:
                self.unresolved += 1
            out[host] = address
        return out

    def _resolve(self, host: str) -> str:
        try:
            return preferred(self._lookup(host))
        except (OSError, UnicodeError, ValueError):
            return ""
        except Exception:  # a resolver bug must not stop routing: the host goes by its domain
            log.exception("looking up %s failed", host)
            return ""

    def _store(self, host: str, future: Future[str]) -> None:
        """Cache a finished lookup's answer, once (by the batch that waited for it, or by the
        lookup's callback when no batch did)."""
        address = "" if future.cancelled() or future.exception() is not None else future.result()
        with self._lock:
            if self._pending.get(host) is not future:
                return
            del self._pending[host]
            ttl = self._ttl if address else self._negative_ttl
            self._cache.put(host, address, self._clock() + ttl)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
