"""Partition choice that agrees with every Kafka client: murmur2 of the key, as the Java client,
aiokafka and confluent-kafka's ``murmur2_random`` partitioner compute it.

The key of a URL (and of its job's feedback) is its registrable domain, or, when the router
resolved the host because ``frontier.ip_scope`` is on, its address (:func:`partition_key`): the
router and the worker both use :func:`partition_of`, so feedback reaches the partition holding
the lease."""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

from aiokafka.partitioner import murmur2


class Keyed(Protocol):
    """A record that carries a partition key: a ``UrlItem`` or a ``Feedback``."""

    @property
    def domain(self) -> str: ...

    @property
    def ip(self) -> str: ...


@lru_cache(maxsize=262144)
def partition_for(key: str, partitions: int) -> int:
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def partition_key(record: Keyed) -> str:
    """The address when the router resolved one (per-IP scope), else the registrable domain."""
    return record.ip or record.domain


def partition_of(record: Keyed, partitions: int) -> int:
    return partition_for(partition_key(record), partitions)
