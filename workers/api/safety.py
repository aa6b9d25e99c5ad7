"""Address safety: never let a submitted URL make a worker connect to private infrastructure.

Checked on the addresses a host *resolves to* (and on IP literals), inside the connector, so the
connection goes only to addresses that passed the check (no DNS-rebinding gap), and every
redirect hop is checked again. Blocked unless explicitly allowed by ``worker.allow_networks``:
private (RFC 1918, ULA), loopback, link-local (incl. cloud metadata 169.254.169.254),
multicast, reserved, unspecified, shared (100.64/10), and the IPv6 addresses that carry one of
those IPv4 addresses (IPv4-mapped, 6to4 ``2002::/16``, Teredo ``2001::/32``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any

import aiohttp

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


class BlockedAddress(aiohttp.ClientError):
    """The URL's host resolves only to addresses the worker may not connect to."""

    def __init__(self, host: str, addresses: Sequence[str]) -> None:
        super().__init__(f"{host} resolves only to blocked addresses {', '.join(addresses[:4])}")
        self.host = host
        self.addresses = list(addresses)


class AddressPolicy:
    def __init__(self, allow: Iterable[str] = (), block_private: bool = True) -> None:
        self.allow: list[Network] = [ipaddress.ip_network(n, strict=False) for n in allow]
        self.block_private = block_private

    def allowed(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
        except ValueError:
            return False
        if any(ip in net for net in self.allow):
            return True
        if not self.block_private:
            return True
        if isinstance(ip, ipaddress.IPv6Address):
            # an IPv4 address inside an IPv6 one reaches that IPv4 host: mapped (::ffff:a.b.c.d) is that
            # host; 6to4 (2002:AABB:CCDD::, through a relay) and Teredo (2001:0::/32, its client) must
            # pass as the IPv4 address they carry too
            if ip.ipv4_mapped is not None:
                return self.allowed(str(ip.ipv4_mapped))
            carried = [ip.sixtofour, ip.teredo[1] if ip.teredo else None]
            if not all(self.allowed(str(a)) for a in carried if a is not None):
                return False
        special = (
            ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
            or ip.is_unspecified or (ip.version == 4 and ip in _CGNAT)
        )  # fmt: skip
        return not special


class SafeConnector(aiohttp.TCPConnector):
    """A TCP connector that connects only to addresses the policy allows."""

    def __init__(self, policy: AddressPolicy, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._policy = policy

    async def _resolve_host(self, host: str, port: int, traces: Any = None) -> list[Any]:
        infos = await super()._resolve_host(host, port, traces=traces)
        allowed = [info for info in infos if self._policy.allowed(str(info["host"]))]
        if not allowed:
            raise BlockedAddress(host, [str(info["host"]) for info in infos])
        return allowed
