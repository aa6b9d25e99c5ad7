"""One frontier partition: the seen set, per-scope-set priority queues, robots.txt, leases and
dispatch, as :class:`PartitionFrontier`.

Everything lives in a :class:`~frontier.core.kv.KV` (RocksDB in production); every write is also
handed to ``changelog(key, value_or_None)`` so that another instance can rebuild the partition.
Time is always passed in; nothing here reads the clock or talks to Kafka.

May import: ``frontier.core``, ``frontier.config``, ``topics.schemas`` (``lint-imports``,
pyproject.toml).

``PartitionFrontier`` owns its parts, each an object over the one store with a small interface
(its module's doc says it, what the part owns and what it is given). A part that needs another
is given it when made: the arrows below go one way, no cycles, and no part reads or writes
another's fields. Why these parts: each owns one family of keys or one in-memory index and is
the only code that changes it (the seen set its ``S`` keys, the queues their ``Q`` keys, counts,
schedule and indexes, the leases their ``L`` keys and deadlines...), so what a part does can be
learnt, and tested on a ``MemoryKV``, from its module alone.

- ``keys.py``        the key layout (every prefix, the META markers), key builders and parsers,
                     and ``QueueId`` (the one place a queue id is joined or split)
- ``records.py``     stored records (``Lease``, ``Stats``) and results (``Dispatch``, ``Report``, ``Sweep``)
- ``store.py``       ``Store``: the KV and the changelog, the one write path (``put``, ``delete``)
- ``crawls.py``      ``Crawls``: the crawls' records (``K``), which crawls wait          ← store
- ``seen.py``        ``SeenSet``: the seen set (``S``), its lifecycle, the sweep       ← crawls
- ``queues.py``      ``Queues``: the queues (``Q``), counts, scheduler, scope index, turns
                     between crawls, parked queues, ``Waiters``                          ← crawls
- ``counts.py``      ``QueueCounts``: each queue's entries, counted ahead of an open (a standby
                     copy's), taken by ``Queues.load``
- ``scopes.py``      ``Scopes``: scopes of a URL, settings, overrides (``O``), policy
                     states (``H``), ``apply``/``decide``                             ← waiters
- ``robots.py``      ``RobotsCache``: robots.txt answers (``R``), refetch, redirects    ← scopes
- ``revisits.py``    ``Revisits``: fetched URLs waiting for their revisit (``V``)
                                                          ← crawls, seen, queues, scopes
- ``recorded.py``    ``Recorded``: a URLFrontier client's recorded URLs (``U``) as the
                     dispatch and results see them; ``Walk``/``Budget``  ← crawls, seen, revisits
- ``reports.py``     ``LeaseIds``; ``Reports``: report leases, URLs that end without a fetch
                                                                         ← seen, crawls
- ``leases.py``      ``Leases``: jobs in flight (``L``), feedback, expiry, a client's holds
                                     ← crawls, seen, queues, scopes, robots, revisits,
                                       recorded, reports
- ``commands.py``    ``Commands``: operators' scope and crawl commands (drops)
                                     ← crawls, seen, queues, scopes, revisits
- ``listing.py``     ``Listing``: the gateway's questions and deletions
                                     ← crawls, seen, queues, leases, commands
- ``visibility.py``  ``Visibility``: status rows of scopes and crawls (reading only)
                                     ← crawls, queues, scopes, robots, revisits, leases
- ``dispatch.py``    ``Dispatcher``: the dispatch loop (the hot path)
                                     ← crawls, queues, scopes, robots, revisits, recorded,
                                       reports, leases
- ``frontier.py``    ``PartitionFrontier``: makes and wires the parts; ``ingest``, ``rebuild``,
                     the inputs' offsets, the counters' save, and the public interface
"""

from frontier.partition.frontier import PartitionFrontier
from frontier.partition.keys import SWEEP_SLICES, QueueId, queue_prefix
from frontier.partition.records import (
    REPORT_KINDS,
    ChangeHook,
    Changelog,
    Dispatch,
    Lease,
    Refused,
    Report,
    Stats,
    Sweep,
)
from frontier.partition.robots import MAX_ROBOTS_REDIRECTS, ROBOTS_CACHE
from frontier.partition.scopes import MAX_OVERRIDES, STATE_CACHE
from frontier.partition.seen import (
    SEEN_DONE,
    SEEN_LEGACY,
    SEEN_OPEN,
    SEEN_REVISIT,
    SWEEP_BATCH,
    SWEEP_INTERVAL,
    SWEEP_SLICES_PER_CALL,
    read_seen,
    seen_value,
)

__all__ = [
    "MAX_OVERRIDES",
    "MAX_ROBOTS_REDIRECTS",
    "REPORT_KINDS",
    "ROBOTS_CACHE",
    "SEEN_DONE",
    "SEEN_LEGACY",
    "SEEN_OPEN",
    "SEEN_REVISIT",
    "STATE_CACHE",
    "SWEEP_BATCH",
    "SWEEP_INTERVAL",
    "SWEEP_SLICES",
    "SWEEP_SLICES_PER_CALL",
    "ChangeHook",
    "Changelog",
    "Dispatch",
    "Lease",
    "PartitionFrontier",
    "QueueId",
    "Refused",
    "Report",
    "Stats",
    "Sweep",
    "queue_prefix",
    "read_seen",
    "seen_value",
]
