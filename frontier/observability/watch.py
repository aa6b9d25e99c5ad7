"""Which scopes a live page may chart ("watch"), checked in one place: the page checks a scope
before it sends the ``watch`` command, and the instance that receives the command (anyone who can
write ``crawl.control`` can send one) checks it again. Pure: no Kafka, no clock.
"""

from __future__ import annotations

import ipaddress
import re

from frontier.core.urls import MAX_SCOPE_CHARS, normal_host, registrable_domain

WATCH_SECONDS = 120.0  # a charted scope stays in the snapshots this long after the page last asked
WATCH_RESEND = WATCH_SECONDS / 4  # one watch command per scope per this many seconds, however many pages ask
MAX_WATCHED = 100  # scopes reported because a page charts them (one scope_row each per snapshot)
MAX_WATCH_SENT = 1000  # distinct scopes this instance may ask for within WATCH_RESEND (then: WatchBusy)
MAX_WATCH_SCOPE = 253  # characters (ControlCommand's limit)
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


class WatchBusy(ValueError):
    """Too many distinct scopes asked for within WATCH_RESEND (the reason is the message)."""


def watch_scope(raw: str) -> str:
    """The scope a live page may chart, in its one spelling, or :class:`ValueError` with the reason.

    Accepted: a host name or IP address (lower case, no trailing dot, numeric IPv4 forms as
    dotted quads), a registrable domain, ``domain#name`` (the domain registrable, the name as in
    a submission: 1-64 characters, no ``#`` or control characters), or ``ip:ADDRESS``; at most
    253 characters. Both the page (before anything is sent) and the instance receiving the
    ``watch`` command (anyone who can write ``crawl.control`` can send one) check it.
    """
    scope = raw.strip()
    if not scope:
        raise ValueError("give a scope: a host, a registrable domain or domain#name")
    if len(scope) > MAX_WATCH_SCOPE:
        raise ValueError(f"scope too long ({len(scope)} > {MAX_WATCH_SCOPE} characters)")
    if scope.startswith("ip:"):
        return "ip:" + _watch_host(scope[3:], address=True)
    base, named, name = scope.partition("#")
    host = _watch_host(base)
    if not named:
        return host
    if not name or len(name) > MAX_SCOPE_CHARS or any(c == "#" or c < " " or c == "\x7f" for c in name):
        raise ValueError(f"invalid scope name {name[:50]!r} (1-{MAX_SCOPE_CHARS} characters, no '#' or control "
                         "characters)")  # fmt: skip
    domain = registrable_domain(host)
    if domain != host:
        raise ValueError(f"a named scope belongs to a registrable domain: {domain}#{name[:50]}, not {host}#...")
    return f"{host}#{name}"


def _watch_host(raw: str, address: bool = False) -> str:
    text = raw.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        if not text.isascii():
            text = text.encode("idna").decode("ascii")
        host = normal_host(text)  # trailing dot, numeric IPv4 forms, IPv6 spelling
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"invalid host {raw[:60]!r}: {exc}") from None
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        if address:
            raise ValueError(f"not an IP address: {raw[:60]!r}") from None
    labels = host.split(".")
    if not host or len(host) > MAX_WATCH_SCOPE or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"invalid host {raw[:60]!r} (letters, digits, '-' and '_' in dot-separated labels)")
    return host
