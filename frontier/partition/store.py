"""The partition's store: a :class:`~frontier.core.kv.KV` and the changelog beside it.

Interface: ``kv`` (the parts read it directly: ``get``, ``first``, ``scan``, ``cursor``) and the
one write path, :meth:`Store.put` and :meth:`Store.delete`, which write to the store and hand the
same change to ``changelog(key, value_or_None)`` so that another instance can rebuild the
partition. Every part writes through here and nowhere else.
"""

from __future__ import annotations

from frontier.core.kv import KV
from frontier.partition.records import Changelog


class Store:
    """The KV and its changelog: ``put`` and ``delete`` write both."""

    __slots__ = ("changelog", "kv")

    def __init__(self, kv: KV, changelog: Changelog) -> None:
        self.kv = kv
        self.changelog = changelog

    def put(self, key: bytes, value: bytes) -> None:
        self.kv.put(key, value)
        self.changelog(key, value)

    def delete(self, key: bytes) -> None:
        self.kv.delete(key)
        self.changelog(key, None)
