"""The wire: the topic catalogue (names, keys, partitioning, cleanup), the typed message schemas
(``schemas``), and the one place Kafka clients are made (``kafka``; ``admin``: topics on a broker).

May import: nothing of ours outside ``topics`` (``lint-imports``, pyproject.toml): the frontier
and the workers stand on it.
"""
