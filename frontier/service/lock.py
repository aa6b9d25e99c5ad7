"""One frontier instance per state directory: an exclusive lock held for the process's life.

Two instances on one ``state_dir`` would open the same RocksDB stores (RocksDB refuses the
second: ``IO error: While lock file``) and each mark the other's stores; the second instance
refuses at start instead, in one line naming the folder and the holder.
"""

from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path
from typing import IO

from frontier.config import ConfigError

_held: dict[Path, IO[str]] = {}  # kept open (and so locked) until the process ends


def lock_state_dir(state_dir: str | Path, app_id: str) -> Path:
    """Take ``<state_dir>/<app_id>/instance.lock`` for this process, or raise ConfigError."""
    folder = Path(state_dir) / app_id
    folder.mkdir(parents=True, exist_ok=True)
    path = (folder / "instance.lock").resolve()
    if path in _held:
        return path  # this process holds it already
    handle = open(path, "a+")  # held open (and so locked) for the process's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"frontier.state_dir {str(Path(state_dir))!r} is in use by another frontier instance ({holder}): "
            "give each instance on this host its own state_dir (CRAWL__FRONTIER__STATE_DIR)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    if not _held:
        atexit.register(_release_all)
    _held[path] = handle
    return path


def _release_all() -> None:
    for handle in _held.values():
        handle.close()  # the lock goes with the process anyway; closed so nothing reports it leaked
    _held.clear()
