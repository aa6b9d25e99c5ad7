"""The topic catalogue (names, keys, partitioning, cleanup) and the typed message schemas."""
