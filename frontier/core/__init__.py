"""The pure core: when each scope may send, and how responses move its delay.

Owns: the throttling policy (``policy``: immutable ``ScopeState`` and typed events; ``adapt``:
v2 adaptation from limit and trouble signals), header parsing (``headers``: Retry-After,
RateLimit), the typed causes of delay changes (``causes``), robots.txt rules (``robots``), the
due-time schedule of queues (``scheduler``), operators' overrides and command routing
(``control``), the key-value contract a partition is written against (``kv``), budgets not told
(``budget``), the caps on times from outside (``caps``), URL parsing and canonical forms
(``urls``) and the one bounded cache (``lru``).

May import: ``frontier.core``, ``frontier.config`` and the pure parts of ``topics``
(``schemas``, ``catalog``, ``partitioning``). Never Kafka, RocksDB, sockets, asyncio, aiohttp or
the clock: time is always passed in (``lint-imports`` and ``tests/test_layout.py`` check it).
"""
