"""The topic catalogue (names, keys, partitioning, cleanup) and the typed message schemas.

May import: nothing outside ``topics``, except ``admin`` (topics on a broker), which makes its
admin clients with ``topics.kafka``.
"""
