"""Workers built on the worker API by code that is not the project's own fetcher, each runnable
and each crawled by the integration tests (tests/integration/test_worker_api.py):

- ``threaded_requests``: blocking, a thread pool, ``requests`` for HTTP;
- ``partial``: async, ``httpx``, fetches only some jobs and declines the rest;
- ``background``: the seed-004 shape, independent processes that take jobs between other work.

May import: ``workers.examples``, ``workers.api`` (the API, by its public names), ``frontier.config``,
and their HTTP clients.
"""
