"""The worker API: how any code takes leased jobs from the frontier, each once it may be sent, and
reports what came of them in the protocol's order (docs/WORKERS.md, docs/PROTOCOL.md).

- ``jobs``        :class:`Jobs`: its life, the shapes (``async for``, ``serve``, ``get``) and one
  job's way through; the parts it makes (used directly: ``jobs.holder.gates``,
  ``jobs.reporter.publisher``, ``jobs.consuming.membership``, ``jobs.endings.dropped``):
- ``holding``     :class:`~workers.api.holding.Holder`: the slots and per-host gates (``gates``), until
  a job may be sent; what user code tells along the way
- ``reporting``   :class:`~workers.api.reporting.Reporter`: what is published, in the protocol's order
- ``consuming``   :class:`~workers.api.consuming.JobConsumer`: the Kafka consumer, assign, revoke and
  lost, whose the partitions are (``membership``), the commits (``offsets``)
- ``endings``     :class:`~workers.api.endings.Endings`: the ways a job ends (reported, handed back,
  held, dropped, given up), what a :class:`LeasedJob` calls
- ``clock``       the time and every wait, injected (:class:`~workers.api.clock.Clock`; tests jump it)
- ``leased``      :class:`LeasedJob`, a job in user code's hands (it calls the API through a small
  protocol, ``Lessor``, that ``endings`` keeps); ``outcome``: ``Outcome`` (:class:`FetchResult`)
  and which outcomes are retried
- ``blocking``    the same for threads and task queues (:class:`BlockingJobs`, :class:`BlockingJob`)
- ``publishing``  records out, acknowledged: pages, follow-ups, batched feedback, rejections
- ``followups``, ``links``  what a page leads to: its redirect target and same-site links
- ``revisits``    a revisit's conditional request and whether it found the page unchanged
- ``addresses``, ``safety``  address checks: before a hand-over, or at connect time (``SafeConnector``)
- ``fetch``, ``builtin``  the built-in aiohttp fetcher (:class:`~workers.api.builtin.AiohttpFetcher`):
  the API fetches the kinds user code does not take with it (robots.txt), the project's worker
  every job

May import: ``workers.api``, ``frontier.core``, ``frontier.config``,
``frontier.observability.process`` and ``topics``; never another room of ``workers``, the
partition or the service (a worker knows the frontier only through its topics; ``lint-imports``).
Its modules import one another, never this package (whose names are for the API's users).
"""

from workers.api.blocking import BlockingJob, BlockingJobs
from workers.api.jobs import Jobs
from workers.api.leased import AlreadyReported, LeasedJob, Outcome
from workers.api.outcome import FetchResult

__all__ = ["AlreadyReported", "BlockingJob", "BlockingJobs", "FetchResult", "Jobs", "LeasedJob", "Outcome"]
