"""The frontier service of one process: partition ownership, restore, standby copies, the
dispatch loop and its Kafka wiring.

Owns: ``service`` (``FrontierService``: applies events to owned partitions, acks after the
changelog, dispatch, status snapshots), ``app`` (the faust app: consumers and rebalances),
``restore`` (open a partition's RocksDB and replay its changelog), ``standby`` (warm copies of
other partitions) and ``rocks`` (the RocksDB store).

May import: everything in ``frontier`` except the command line, the client and the demo.
"""
