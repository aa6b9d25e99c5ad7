"""The frontier service of one process: partition ownership, restore, standby copies, the
dispatch loop and its Kafka wiring.

Owns: ``service`` (``FrontierService``: applies events to owned partitions, acks after the
changelog, dispatch; it owns its parts: ``owned`` (the partitions served here, shared by the
parts), ``lifecycle`` (partitions opened, retried, closed, dropped), ``reporting`` (status
snapshots, gauges, watches) and ``questions`` (a URLFrontier gateway's questions)), ``app``
(the faust app: consumers and rebalances), ``restore`` (open a partition's RocksDB and replay
its changelog), ``standby`` (warm copies of other partitions) and ``rocks`` (the RocksDB store).

May import: everything in ``frontier`` below it (not the commands nor the demo), ``topics``;
never ``workers`` (``lint-imports``, pyproject.toml).
"""
