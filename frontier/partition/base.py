"""The partition's fields and in-memory indexes (rebuilt from the store by ``rebuild``), and its
one way to write: to the store and to the changelog. The modules beside it add the behaviour as
mixins over these fields; ``frontier.py`` assembles them into ``PartitionFrontier``."""

from __future__ import annotations

import os
import random
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field

from frontier.config import FrontierConfig, ThrottleConfig
from frontier.core import policy
from frontier.core.control import Override
from frontier.core.kv import KV
from frontier.core.robots import Rules, agent_token
from frontier.core.scheduler import Scheduler
from frontier.partition.keys import SWEEP_SLICES, QueueId
from frontier.partition.records import ChangeHook, Changelog, CrawlRecord, Stats
from topics.schemas import DEFAULT_CRAWL


@dataclass
class PartitionBase:
    partition: int
    kv: KV
    settings: FrontierConfig
    throttle: ThrottleConfig
    changelog: Changelog
    user_agent: str = "kafka-crawl-frontier"
    on_change: ChangeHook | None = None
    rng: random.Random = field(default_factory=random.Random)
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        self._agent = agent_token(self.user_agent)
        self._scheduler = Scheduler()  # queue ids by due time
        self._leases: list[tuple[float, str]] = []  # (deadline, lease id), lazily pruned
        # scope or robots:<origin> → blocked multi-scope queues. A host's own queue needs no entry:
        # every lease that closes on a host reschedules that host's queue (see Leases._closed).
        self._waiters: dict[str, set[QueueId]] = defaultdict(set)
        self._queued: Counter[QueueId] = Counter()  # queue id → URLs queued
        # scope → the multi-scope queue ids in _queued that contain it, so that a watched scope's
        # row costs O(its queues); a single-scope queue is _queued[scope] itself
        self._multi: dict[str, set[QueueId]] = {}
        self._robots_pending: set[str] = set()  # origins whose robots.txt is being fetched
        self._rules: OrderedDict[str, Rules] = OrderedDict()  # origin → rules (LRU over R<origin>)
        # origin → the agents (other than the frontier's own) whose Crawl-delay was applied since
        # its rules were stored (memory only: after a restart, applied again at the next dispatch)
        self._agent_delays: dict[str, set[str]] = {}
        # (crawl, origin) → the robots.txt copy (its fetch time) whose sitemaps were submitted for the
        # crawl (discover_sitemaps; memory only: after a restart submitted again, and the seen set
        # drops them); a robots.txt fetched again is read again
        self._sitemaps_read: OrderedDict[tuple[str, str], float] = OrderedDict()  # an LRU
        self._unreported: list[str] = []  # report leases whose page is not out yet
        self.inflight = 0
        self._seq = 0  # queue sequence: monotonic (FIFO within a priority), see Queues._qkey
        self._due_low = 0  # where the next due-time key looks for a free place (Queues._qkey_due)
        # lease ids: 64 random bits per incarnation + a counter (unique without uuid4's cost)
        self._lease_prefix = os.urandom(8).hex()
        self._lease_seq = 0
        self._states: OrderedDict[str, policy.ScopeState] = OrderedDict()  # LRU cache over H<scope>
        self._saved_stats = Stats()
        # operators' overrides by name (at most MAX_OVERRIDES); a scope finds the ones covering it
        # by looking up its own dot-suffixes, so their number does not slow dispatch
        self._overrides: dict[str, Override] = {}
        self._next_revisit: float | None = None
        # the seen-set sweep's cursor: a slice of the fingerprint space and the last key looked at
        # in it. Not stored: each incarnation starts at a random slice, so restarts still cover
        # the whole set (in expectation) instead of sweeping its beginning again and again.
        self._sweep_slice = int.from_bytes(os.urandom(2), "big") % SWEEP_SLICES
        self._sweep_after = b""
        self._swept_at: float | None = None  # when sweep_due last ran a sweep
        self._inputs: dict[str, int] = {}  # input role → offset applied up to (cache of I<role>)
        # crawls (crawls.py): their records (K<crawl>), what they have queued and in flight, the
        # crawls' queues of one set of scopes (whose turns are shared out), and queues put aside
        # while their crawl is paused or has no worker
        self._crawls: dict[str, CrawlRecord] = {}
        self._crawls_dirty: set[str] = set()
        self.refused: list[tuple[int, str]] = []  # items of the last ingest left out, and why (rejected)
        self._crawl_queued: Counter[str] = Counter()
        self._crawl_inflight: Counter[str] = Counter()
        self._groups: dict[QueueId, set[QueueId]] = {}  # default crawl's queue id → other crawls' queues of its scopes
        self._served: dict[QueueId, int] = {}  # queue → the turn it was last chosen at (round robin)
        self._turn = 0
        self._parked: dict[str, set[QueueId]] = defaultdict(set)  # held crawl → its queues put aside
        self._held: frozenset[str] = frozenset()  # crawls paused here, or without a worker
        self.idle_crawls: frozenset[str] = frozenset()  # crawls with no worker (the service says)
        # the crawls that have a worker (the service says; None: every crawl, as without a service):
        # any other crawl waits, a new one too until the service has seen its workers
        self.served_crawls: frozenset[str] | None = None

    def new_crawl_refused(self, name: str) -> str:
        """Why a record of crawl ``name`` may not make the crawl here ("" when it may): a partition
        keeps at most ``frontier.max_crawls`` crawls (each a changelogged record, in every
        partition), so a producer naming a new crawl per record cannot grow them without end."""
        if name in self._crawls or name == DEFAULT_CRAWL or len(self._crawls) < self.settings.max_crawls:
            return ""
        return (f"too many crawls: partition {self.partition} has {len(self._crawls)} (frontier.max_crawls); "
                f"crawl {name[:64]!r} not made (drop finished crawls with --forget, or raise the setting)")  # fmt: skip

    def _crawl(self, name: str) -> CrawlRecord:
        """The crawl's record here (made when it first appears), marked to be saved with the
        counters (``save_stats``): callers change it."""
        record = self._crawls.get(name)
        if record is None:
            record = self._crawls[name] = CrawlRecord()
        self._crawls_dirty.add(name)
        return record

    def _waits(self, crawl: str) -> bool:
        """Whether the crawl's URLs wait (paused here, or no worker for it: see ``crawls.py``)."""
        return crawl in self._held or (self.served_crawls is not None and crawl not in self.served_crawls)

    def _generation(self, crawl: str) -> int:
        record = self._crawls.get(crawl)
        return record.generation if record is not None else 0

    # -- writes (store + changelog) -------------------------------------------------------------
    def _put(self, key: bytes, value: bytes) -> None:
        self.kv.put(key, value)
        self.changelog(key, value)

    def _delete(self, key: bytes) -> None:
        self.kv.delete(key)
        self.changelog(key, None)
