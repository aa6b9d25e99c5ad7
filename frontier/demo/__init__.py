"""The local demo: a broker, a frontier, workers and demo sites on the loopback range
(``crawl`` runs it, ``sites`` serves the sites, ``stack`` starts the processes; the
integration tests and benchmarks use ``stack`` too).

May import: anything.
"""
