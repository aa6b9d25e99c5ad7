"""The partitioner written out in topics.partitioning agrees with Kafka's murmur2 (aiokafka's
copy of the Java client's), for every length remainder and any bytes."""

from __future__ import annotations

from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.partitioning import murmur2, partition_for


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafkas(data: bytes) -> None:
    assert murmur2(data) == aiokafka_murmur2(data) & 0xFFFFFFFF


def test_known_partitions_of_domains() -> None:
    for domain in ("example.com", "toscrape.com", "a.test", "", "127.0.0.1", "xn--bcher-kva.example"):
        expected = (aiokafka_murmur2(domain.encode()) & 0x7FFFFFFF) % 12
        assert partition_for(domain, 12) == expected
