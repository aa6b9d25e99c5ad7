"""Fetch workers, a room each: the worker API any code takes jobs through, and the workers on it.

- ``api``       the worker API (:class:`~workers.api.jobs.Jobs`, :class:`~workers.api.leased.LeasedJob`,
  ``Outcome``, the blocking shapes) and what it needs to keep the protocol and stay polite,
  including the built-in aiohttp fetcher it fetches robots.txt with
- ``fetcher``   the project's worker process (``crawl-frontier worker``): the API serving the built-in
  fetcher or a ``--fetcher``
- ``scrapy``    Scrapy spiders on the API: the add-on ``workers.scrapy.FrontierAddon`` (settings only)
- ``urlfrontier`` the URLFrontier gRPC API (``crawl-frontier urlfrontier``): a worker of its clients' crawls
- ``examples``  workers by other code (requests, httpx, urllib) and a Scrapy project, crawled in CI

The rooms import downwards only: ``api`` none of the others, the others ``api`` (and not one
another: ``lint-imports``, pyproject.toml); no module of ``workers`` imports, even lazily or for
types only, one that imports it back (tests/test_layout.py). This package itself imports nothing.
"""
