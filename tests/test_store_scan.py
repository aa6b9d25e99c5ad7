"""Prefix scans of the RocksDB store are bounded to their prefix (no walk over the deleted
entries after it) and return exactly what the in-memory store returns."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frontier.core.kv import MemoryKV
from frontier.service.rocks import RocksKV, prefix_end

KEYS = st.binary(min_size=1, max_size=4)


def test_prefix_end_is_the_next_key_after_the_prefix_range() -> None:
    assert prefix_end(b"Qa\x00") == b"Qa\x01"
    assert prefix_end(b"Q\xff") == b"R"
    assert prefix_end(b"Q\xff\xff") == b"R"
    assert prefix_end(b"\xff\xff") is None
    assert prefix_end(b"") is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    puts=st.lists(KEYS, max_size=40),
    deletes=st.lists(KEYS, max_size=40),
    prefixes=st.lists(st.binary(min_size=1, max_size=3), min_size=1, max_size=6),
    afters=st.lists(KEYS, max_size=4),
)
def test_scans_match_the_memory_store(tmp_path: Path, puts: list[bytes], deletes: list[bytes],
                                      prefixes: list[bytes], afters: list[bytes]) -> None:  # fmt: skip
    path = tmp_path / f"db{abs(hash((tuple(puts), tuple(deletes), tuple(prefixes))))}"
    rocks, memory = RocksKV(path), MemoryKV()
    try:
        for kv in (rocks, memory):
            for key in puts:
                kv.put(key, key[::-1])
            for key in deletes:
                kv.delete(key)
        for prefix in [*prefixes, b"\xff", b"\xff\xff"]:
            whole = list(memory.scan(prefix))
            assert list(rocks.scan(prefix)) == whole
            assert rocks.first(prefix) == memory.first(prefix)
            # resumed after a key: present, deleted, never written, before or past the prefix
            for after in [*afters, *puts[:3], *deletes[:2], prefix, prefix + b"\xff"]:
                expected = [(k, v) for k, v in whole if k > after]
                assert list(rocks.scan(prefix, after=after)) == expected, after
                assert list(memory.scan(prefix, after=after)) == expected, after
    finally:
        rocks.close()
        RocksKV.destroy(path)
