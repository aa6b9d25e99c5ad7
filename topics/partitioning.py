"""Partition choice that agrees with every Kafka client: murmur2 of the key, as the Java client,
aiokafka and confluent-kafka's ``murmur2_random`` partitioner compute it."""

from __future__ import annotations

from functools import lru_cache

from aiokafka.partitioner import murmur2


@lru_cache(maxsize=262144)
def partition_for(key: str, partitions: int) -> int:
    return int(murmur2(key.encode()) & 0x7FFFFFFF) % partitions
