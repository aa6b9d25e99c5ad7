"""Partition choice that agrees with every Kafka client: murmur2 of the key, as the Java client,
aiokafka and confluent-kafka's ``murmur2_random`` partitioner compute it.

The key of a URL (and of its job's feedback) is its registrable domain, or, when the router
resolved the host because ``frontier.ip_scope`` is on, its address (:func:`partition_key`): the
router and the worker both use :func:`partition_of`, so feedback reaches the partition holding
the lease.

:func:`murmur2` is Kafka's own hash (``org.apache.kafka.common.utils.Utils.murmur2``), written
out here so that the pure core never imports a Kafka client library (aiokafka's copy comes with
its whole client); ``tests/test_partitioning.py`` checks it against aiokafka's, and the
integration test ``test_partitioner_agreement`` against the broker's own choice."""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol


class Keyed(Protocol):
    """A record that carries a partition key: a ``UrlItem`` or a ``Feedback``."""

    @property
    def domain(self) -> str: ...

    @property
    def ip(self) -> str: ...


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c) of ``data``, as an unsigned 32-bit integer."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length % 4
    if extra >= 3:
        h ^= data[whole + 2] << 16
    if extra >= 2:
        h ^= data[whole + 1] << 8
    if extra >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


@lru_cache(maxsize=262144)
def partition_for(key: str, partitions: int) -> int:
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def partition_key(record: Keyed) -> str:
    """The address when the router resolved one (per-IP scope), else the registrable domain."""
    return record.ip or record.domain


def partition_of(record: Keyed, partitions: int) -> int:
    return partition_for(partition_key(record), partitions)
