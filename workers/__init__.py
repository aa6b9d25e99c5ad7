"""Fetch workers: the worker API any code can take jobs through, and the project's own worker on it.

- ``jobs``        :class:`~workers.api.jobs.Jobs`: the worker API (async pull ``async for`` and callback ``serve``);
  assembled from ``base`` (its fields), ``holding`` (until a job may be sent), ``reporting``
  (what is published, in the protocol's order) and ``consuming`` (the Kafka consumer)
- ``leased``      :class:`~workers.api.leased.LeasedJob` (a job in user code's hands) and ``Outcome``
- ``blocking``    the same for threads and task queues (``BlockingJobs``, ``BlockingJob``)
- ``publishing``  records out, acknowledged: pages, follow-ups, batched feedback, rejections
- ``gates``, ``offsets``, ``addresses``, ``safety``  per-host timing, committable offsets, address checks
- ``fetch``, ``builtin``, ``followups``, ``links``  the built-in aiohttp fetcher and what a page leads to
- ``worker``      the project's worker: the API serving the built-in fetcher or a ``--fetcher``
- ``examples``    workers by other code (requests, httpx, urllib), crawled in CI

May import: ``workers``, ``frontier.core``, ``frontier.config``, ``frontier.kafka``,
``frontier.intake.urls``, ``frontier.observability.metrics`` and ``topics``; never the
partition or the service (a worker knows the frontier only through its topics).
"""
