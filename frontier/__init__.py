"""The crawl frontier. Packages, top down (see docs/ARCHITECTURE.md, "Map"); each imports only
those below it (``lint-imports``, from pyproject.toml's ``[tool.importlinter]`` contracts):

- ``cli``: the commands (a thin shell); ``demo``: the local demo stack
- ``service``: the running frontier (Kafka, RocksDB), composed of its parts
- ``observability``: the service's metrics, live page and loop probe (``process``: what the
  workers' metrics share with it)
- ``partition``: one partition's state machine over a key-value store (pure), composed of its
  parts; ``intake``: the router; ``sim``: the throttling simulator; ``archive``: WARC files
- ``client``: the client side (``FrontierClient``, the status feed and views)
- ``core``: pure throttling and scheduling logic, URL canonical forms (no I/O, time passed in)
- ``config``: the settings

The wire (records, topics, Kafka clients) is ``topics``; workers use ``core``, ``config``,
``client`` and ``observability.process`` only.
"""
