"""Scrapy's DNS resolver with the workers' address check, installed on the reactor by the add-on.

The worker API checks a job's host before it hands the job over, but Scrapy resolves the host
again when it connects: a hostile DNS server may answer with a public address the first time and
a private one (a cloud's metadata service, say) the second. :class:`SafeResolver` is Scrapy's own
caching resolver whose every answer is checked against ``worker.allow_networks`` /
``block_private`` when Scrapy connects (to a site, or to a proxy), IP literals included: a
blocked answer is no answer, the download fails, and the job is reported as ``blocked_address``
(:func:`blocked_recently` tells the downloader middleware). An IP literal is not resolved: the
job's URL is checked by the worker API, and a proxy is one the project allowed.

Scrapy sets its resolver up from the process's settings, before any add-on of a spider's
``custom_settings`` is read, so the scheduler installs this one when the spider opens
(:func:`install`), in place of Scrapy's default; a project that chose another resolver keeps it,
with a WARNING that its answers are not checked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scrapy.resolver import CachingThreadedResolver
from twisted.internet.error import DNSLookupError

from frontier.core.lru import LRU
from workers.api.addresses import say_blocked
from workers.api.safety import AddressPolicy

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

log = logging.getLogger("workers.scrapy")

KEPT = 1000  # names whose answer was blocked lately, for the middleware's error kind
_blocked: LRU[str, None] = LRU(KEPT)


def blocked_recently(host: str) -> bool:
    """Whether a lookup of ``host`` was refused by the address check lately."""
    return host.lower() in _blocked


class SafeResolver(CachingThreadedResolver):
    """Scrapy's ``CachingThreadedResolver``, its answers checked by an :class:`AddressPolicy`."""

    def __init__(self, reactor: Any, cache_size: int, timeout: float, policy: AddressPolicy) -> None:
        super().__init__(reactor, cache_size, timeout)
        self.policy = policy

    @classmethod
    def of(cls, settings: Any, reactor: Any, policy: AddressPolicy) -> SafeResolver:
        """As Scrapy makes its default resolver from ``settings``."""
        cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        return cls(reactor, cache_size, settings.getfloat("DNS_TIMEOUT"), policy)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        d = super().getHostByName(name, timeout)
        d.addCallback(self.checked, name)
        return d

    def checked(self, address: str, name: str) -> str:
        """``address`` if the policy allows it; else :class:`DNSLookupError` (said once per host)."""
        if self.policy.allowed(address):
            return address
        key = name.lower()
        _blocked.put(key, None)
        say_blocked(log, name, [address])
        raise DNSLookupError(f"{name} resolves to {address}, which this worker may not reach")


def install(settings: Any, policy: AddressPolicy) -> bool:
    """Put a :class:`SafeResolver` on the running reactor in place of Scrapy's default resolver;
    False (said) when the project installed a resolver of its own."""
    from twisted.internet import reactor

    current = getattr(reactor, "resolver", None)
    if isinstance(current, SafeResolver):
        current.policy = policy
        return True
    if type(current) is not CachingThreadedResolver:
        log.warning("crawl-frontier add-on: the project's DNS resolver %s is kept: its answers are not checked "
                    "against worker.allow_networks when Scrapy connects (the worker API checked each job's host "
                    "before; a DNS answer that changes in between is not caught)", type(current).__name__)  # fmt: skip
        return False
    SafeResolver.of(settings, reactor, policy).install_on_reactor()
    return True
