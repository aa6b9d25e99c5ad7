"""The crawl frontier. Packages (see docs/ARCHITECTURE.md, "Map"):

- ``core``: pure throttling and scheduling logic (no I/O, time passed in)
- ``partition``: one partition's state machine over a key-value store (pure)
- ``intake``: URL parsing and routing; ``service``: the running frontier (Kafka, RocksDB)
- ``observability``: status, metrics, the live page; ``kafka``: where every Kafka client is made
- ``config``, ``cli``, ``client``, ``archive`` (WARC files from pages); ``demo`` and ``sim``

Which package may import which is checked by ``tests/test_layout.py``.
"""
