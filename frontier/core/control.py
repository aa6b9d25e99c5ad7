"""Scope commands at run time: pause, resume, drop, and delay/concurrency overrides.

A command travels on ``crawl.control`` to every partition (an ``ip:`` scope: to its address's
partition), so the instances owning the scope's URLs apply it, whichever instances they are,
whether the frontier keys URLs by domain or (``frontier.ip_scope``) by address, and the result
is in each partition's state (changelogged): it survives restarts and takeovers.

Matching: a command on ``NAME`` applies to the scope ``NAME`` itself and to every host under it
(``NAME`` or ``*.NAME``), so ``pause example.com`` holds ``www.example.com`` too.
"""

from __future__ import annotations

import msgspec

from frontier.core.urls import normal_host, registrable_domain
from topics.partitioning import partition_for
from topics.schemas import CRAWLS_VERSION, ControlCommand, encode


class Override(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What operators set on one scope name (stored as ``O<name>`` in the partition)."""

    paused: bool = False
    delay: float | None = None
    concurrency: int | None = None
    blocked_until: float = 0.0  # no request before then (epoch s): a URLFrontier client's BlockQueueUntil

    def empty(self) -> bool:
        return not self.paused and self.delay is None and self.concurrency is None and not self.blocked_until


def scope_domain(scope: str) -> str:
    """The registrable domain whose partition holds ``scope``."""
    base = scope.split("#", 1)[0].lower().rstrip(".")
    return registrable_domain(base)


def covers(name: str, scope: str) -> bool:
    """Does a command on ``name`` apply to ``scope``?"""
    return scope == name or scope.endswith("." + name)


def updated(current: Override, cmd: ControlCommand) -> Override:
    """The override after ``cmd`` (drop leaves it unchanged)."""
    if cmd.action == "pause":
        return msgspec.structs.replace(current, paused=True)
    if cmd.action == "resume":
        return msgspec.structs.replace(current, paused=False)
    if cmd.action == "set":
        return msgspec.structs.replace(
            current,
            delay=cmd.delay if cmd.delay is not None else current.delay,
            concurrency=cmd.concurrency if cmd.concurrency is not None else current.concurrency,
        )
    if cmd.action == "block":
        return msgspec.structs.replace(current, blocked_until=cmd.until or 0.0)
    if cmd.action == "clear":
        return Override(paused=current.paused, blocked_until=current.blocked_until)
    return current


def control_record(cmd: ControlCommand, partitions: int) -> tuple[bytes, bytes, int]:
    """Validate ``cmd`` and return its (key, value, partition) on ``crawl.control``: the partition
    of the scope's registrable domain, or for an address scope ``ip:<address>`` (frontier.ip_scope)
    the partition of that address, where its URLs are."""
    cmd.validate()
    if cmd.crawl:  # a crawl command: to every partition (control_records), marked version 3
        return f"crawl:{cmd.crawl}".encode(), encode(msgspec.structs.replace(cmd, v=CRAWLS_VERSION)), 0
    key = scope_key(cmd.scope)
    if cmd.scope.startswith("ip:"):
        cmd = msgspec.structs.replace(cmd, scope=f"ip:{key}")
    return key.encode(), encode(cmd), partition_for(key, partitions)


def scope_key(scope: str) -> str:
    """The partition key of a scope: its registrable domain, or for ``ip:<address>`` the address
    in the router's spelling (an IPv6 address written another way would reach another partition,
    under a name nothing has)."""
    if scope.startswith("ip:"):
        return normal_host(scope[3:].strip().strip("[]").lower())
    return scope_domain(scope)


def control_records(cmd: ControlCommand, partitions: int) -> list[tuple[bytes, bytes, int]]:
    """Every (key, value, partition) ``cmd`` goes to. A host, domain or named scope goes to every
    partition, each applying it to what it holds: with ``frontier.ip_scope`` a host's URLs are
    keyed by its address, so its partition is not known from its name, and whether the frontier
    runs that way is its configuration, not the sender's (a command sent to the domain's
    partition alone would be stored there and change nothing). An address scope
    ``ip:<address>`` has one partition (:func:`control_record`)."""
    key, value, partition = control_record(cmd, partitions)
    if cmd.scope.startswith("ip:") and not cmd.crawl:
        return [(key, value, partition)]
    return [(key, value, p) for p in range(partitions)]
