"""The partition's ``Store`` and ``SeenSet`` alone, on a ``MemoryKV`` (not through PartitionFrontier)."""

from collections.abc import Iterator

from frontier.config import FrontierConfig
from frontier.core.kv import MemoryKV
from frontier.core.urls import parse_input
from frontier.partition.crawls import Crawls
from frontier.partition.keys import SEEN
from frontier.partition.records import Stats
from frontier.partition.seen import SEEN_DONE, SEEN_LEGACY, SEEN_OPEN, SeenSet, read_seen, seen_value
from frontier.partition.store import Store
from topics.schemas import UrlItem

SETTINGS = FrontierConfig(seen_retention=100.0)


class Log:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))


def parts(settings: FrontierConfig = SETTINGS) -> tuple[MemoryKV, Log, Crawls, SeenSet, Stats]:
    kv, log, stats = MemoryKV(), Log(), Stats()
    store = Store(kv, log)
    crawls = Crawls(0, store, settings)
    return kv, log, crawls, SeenSet(store, crawls, settings, stats), stats


def url(u: str, crawl: str = "default") -> UrlItem:
    item = parse_input(u.encode())
    assert isinstance(item, UrlItem)
    return UrlItem(url=item.url, host=item.host, domain=item.domain, canonical=item.canonical, crawl=crawl)


def test_the_store_writes_the_kv_and_the_changelog_alike() -> None:
    kv, log = MemoryKV(), Log()
    store = Store(kv, log)
    store.put(b"Sa", b"1")
    store.delete(b"Sb")
    assert kv.get(b"Sa") == b"1" and kv.get(b"Sb") is None
    assert log.records == [(b"Sa", b"1"), (b"Sb", None)]


def test_an_item_has_one_key_per_crawl_and_generation() -> None:
    _, _, crawls, seen, _ = parts()
    a, b = url("http://a.test/x"), url("http://a.test/x", crawl="books")
    assert seen.key(a) == seen.key(url("HTTP://A.TEST:80/x")) and seen.key(a) != seen.key(b)
    before = seen.key(b)
    crawls.record("books").generation += 1
    assert seen.key(b) != before and seen.key(b).startswith(SEEN)


def test_settle_reopen_and_forget_follow_the_lifecycle() -> None:
    kv, log, _, seen, stats = parts()
    item = url("http://a.test/1")
    assert seen.state(item) is None
    seen.reopen(item, 10.0)
    assert seen.state(item) == SEEN_OPEN
    writes = len(log.records)
    seen.reopen(item, 11.0)  # open already: nothing written
    assert len(log.records) == writes
    seen.forget(seen.key(item))  # an open entry is left alone
    assert seen.state(item) == SEEN_OPEN and stats.forgotten == 0
    seen.settle(item, 12.0)
    raw = kv.get(seen.key(item))
    assert raw is not None and read_seen(raw) == (SEEN_DONE, 12.0, -1)
    seen.forget(seen.key(item))
    assert seen.state(item) is None and stats.forgotten == 1 and log.records[-1] == (seen.key(item), None)


def test_the_sweep_forgets_done_entries_past_the_retention_and_stamps_legacy_ones() -> None:
    kv, _, _, seen, stats = parts()
    old, recent, still_open, legacy = (url(f"http://a.test/{n}") for n in range(4))
    seen.settle(old, 0.0)
    seen.settle(recent, 90.0)
    seen.reopen(still_open, 0.0)
    kv.put(seen.key(legacy), b"1")
    assert read_seen(b"1")[0] == SEEN_LEGACY
    done = seen.sweep_seen(150.0, limit=10**6)
    while done.looked < 4:  # the cursor starts at a random slice: a cycle may take more calls
        done = done._replace(looked=done.looked + seen.sweep_seen(150.0).looked)
    assert seen.state(old) is None and stats.forgotten == 1
    assert seen.state(recent) == SEEN_DONE and seen.state(still_open) == SEEN_OPEN
    assert kv.get(seen.key(legacy)) == seen_value(SEEN_DONE, 150.0)


def test_sweep_due_runs_once_an_interval() -> None:
    _, _, _, seen, _ = parts()
    seen.settle(url("http://a.test/1"), 0.0)
    assert seen.sweep_due(1000.0).looked >= 0
    assert seen.sweep_due(1001.0).looked == 0  # within SWEEP_INTERVAL of the last run: not run


class CountingKV(MemoryKV):
    """A MemoryKV that counts its scans."""

    def __init__(self) -> None:
        super().__init__()
        self.scans = 0

    def scan(self, prefix: bytes, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        self.scans += 1
        return super().scan(prefix, after)


def test_a_sweep_call_scans_its_slices_at_once_not_one_by_one() -> None:
    """A sweep call over a sparse seen set seeks once (twice when it wraps past the last slice), not
    once per slice it covers (up to SWEEP_SLICES_PER_CALL seeks, ~12 % of the frontier's CPU on a
    crawl of 100 sites); what it looks at is as before: a cycle forgets every aged-out entry once."""
    kv, stats = CountingKV(), Stats()
    store = Store(kv, Log())
    seen = SeenSet(store, Crawls(0, store, SETTINGS), SETTINGS, stats)
    keys = [SEEN + bytes((hi, 0)) + bytes(14) for hi in range(0, 256, 8)]  # one in every 2,048th slice
    for key in keys:
        kv.put(key, seen_value(SEEN_DONE, 0.0))
    calls = 0
    while stats.forgotten < len(keys):
        before = kv.scans
        seen.sweep_seen(150.0, limit=3)
        assert kv.scans - before <= 2
        calls += 1
        assert calls <= 70  # a cycle: 65,536 slices / 1,024 a call, and 32 entries / 3 a call
    assert not list(kv.scan(SEEN))
