"""The project's fetch worker, ``crawl-frontier worker``: the worker API serving the built-in aiohttp
fetcher (:class:`~workers.api.builtin.AiohttpFetcher`), or a fetcher named with ``--fetcher
package.module:factory`` (``worker.fetcher`` in the configuration).

- ``worker``  :class:`~workers.fetcher.worker.FetchWorker`, :func:`~workers.fetcher.worker.run_worker`
  and the ``--fetcher`` loading (:func:`~workers.fetcher.worker.load_fetcher`)

May import: ``workers.fetcher``, ``workers.api`` (the API and its built-in fetcher),
``frontier.core``, ``frontier.config``, ``topics.kafka``, ``frontier.core.urls``,
``frontier.observability.process`` and ``topics``.
"""
