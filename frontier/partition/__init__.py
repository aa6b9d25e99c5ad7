"""One frontier partition: the seen set, per-scope-set priority queues, robots.txt, leases and
dispatch, as :class:`PartitionFrontier`.

Everything lives in a :class:`~frontier.core.kv.KV` (RocksDB in production); every write is also
handed to ``changelog(key, value_or_None)`` so that another instance can rebuild the partition.
Time is always passed in; nothing here reads the clock or talks to Kafka.

May import: ``frontier.core``, ``frontier.config``, ``frontier.core.urls``, ``topics.schemas``
(checked by ``tests/test_layout.py``). Its modules, each a mixin over the fields of ``base.py``:

- ``keys.py``        the key layout (every prefix, the META markers), key builders and parsers,
                     and ``QueueId`` (the one place a queue id is joined or split)
- ``records.py``     stored records (``Lease``, ``Stats``) and results (``Dispatch``, ``Report``, ``Sweep``)
- ``base.py``        the fields, the in-memory indexes, and the write path (store + changelog)
- ``seen.py``        the seen set: values, lifecycle (open, done, revisit), the sweep, forget
- ``queues.py``      queues: enqueue, the scope index of multi-scope queues, an operator's drop
- ``scopes.py``      scopes of a URL, settings and overrides, the state cache, ``_apply``/``_decide``
- ``robots.py``      robots.txt answers: cache, refetch and retry times, redirects, failures
- ``revisits.py``    fetched URLs waiting for their revisit
- ``leases.py``      leases: dispatch's lease, feedback, expiry, report leases
- ``visibility.py``  status rows: why a scope is not dispatching
- ``frontier.py``    ``PartitionFrontier``: ingest, dispatch, rebuild; the write ordering
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
