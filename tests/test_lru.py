"""The bounded caches (frontier.core.lru): an LRU keeps its bound, drops the least recently used
first, refreshes on get and put (not on peek); a TtlCache also forgets what expired."""

from __future__ import annotations

import pytest

from frontier.core.lru import LRU, TtlCache


def test_put_drops_the_oldest_beyond_the_bound() -> None:
    cache: LRU[str, int] = LRU(3)
    for i in range(10):
        cache.put(f"k{i}", i)
        assert len(cache) <= 3
    assert list(cache) == ["k7", "k8", "k9"] and list(reversed(cache)) == ["k9", "k8", "k7"]
    assert "k6" not in cache and "k7" in cache
    assert cache.oldest() == ("k7", 7)
    assert list(cache.items()) == [("k7", 7), ("k8", 8), ("k9", 9)] and list(cache.values()) == [7, 8, 9]


def test_get_refreshes_peek_does_not() -> None:
    cache: LRU[str, int] = LRU(2)
    cache["a"] = 1
    cache["b"] = 2
    assert cache.peek("a") == 1
    cache.put("c", 3)  # a was the oldest (peek left it so)
    assert list(cache) == ["b", "c"]
    assert cache.get("b") == 2  # now the newest
    cache.put("d", 4)
    assert list(cache) == ["b", "d"]
    assert cache.get("x") is None and cache.get("x", 0) == 0 and cache.peek("x", -1) == -1


def test_put_of_a_key_present_replaces_and_refreshes_it() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert list(cache.items()) == [("a", 10), ("c", 3)]


def test_pop_delete_clear() -> None:
    cache: LRU[int, str] = LRU(5)
    for i in range(5):
        cache.put(i, str(i))
    assert cache.pop(2) == "2" and cache.pop(2) is None and cache.pop(2, "none") == "none"
    del cache[0]
    with pytest.raises(KeyError):
        del cache[0]
    assert list(cache) == [1, 3, 4] and bool(cache)
    cache.clear()
    assert len(cache) == 0 and not cache and cache.oldest() is None


def test_the_bound_holds_over_a_million_keys() -> None:
    cache: LRU[int, None] = LRU(1000)
    for i in range(1_000_000):
        cache.put(i, None)
    assert len(cache) == 1000 and cache.oldest() == (999_000, None)


def test_a_bound_under_one_is_refused() -> None:
    with pytest.raises(ValueError):
        LRU(0)
    with pytest.raises(ValueError):
        TtlCache(0)


def test_a_ttl_cache_forgets_what_expired_and_keeps_its_bound() -> None:
    cache: TtlCache[str, str] = TtlCache(max_entries=2)
    cache.put("a", "1", expires=10.0)
    cache.put("b", "2", expires=20.0)
    assert cache.get("a", 9.9) == "1"  # refreshed: b is the oldest now
    cache.put("c", "3", expires=30.0)
    assert cache.get("b", 0.0) is None and len(cache) == 2
    assert cache.get("a", 10.0) is None and len(cache) == 1  # expired at its time, and gone when read
    assert cache.get("c", 29.0) == "3" and cache.max_entries == 2
