"""After a crash, an owned partition's store is trusted up to its committed marker (issue 39): it
holds only transactions that committed (frontier/service/pending.py), so a restart replays the
changelog's tail only, under the same retention rule as a clean close; a real kill -9 keeps the
committed batches (RocksDB's write-ahead log) and never a marker without the restored records
written before it without the log."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING

from frontier.partition.keys import COMMITTED_KEY
from frontier.service.pending import Pending
from frontier.service.restore import LocalCopy, local_copy, open_partition
from frontier.service.rocks import RocksKV
from tests.test_state import DAY, LEASE, PAUSE, QUEUED, FakeChangelog, T


def crashed_store(path: Path) -> None:
    """A partition's store as a crash leaves it: a lease, a pause and a queued URL committed up
    to changelog offset 2 (at T), then a write whose transaction never committed."""
    kv = Pending(RocksKV(path), clock=lambda: T)
    for key in (LEASE, PAUSE, QUEUED):
        kv.put(key, b"v")
    kv.committed([kv.seal()], 2)
    kv.put(b"Snever", b"uncommitted")
    kv.seal()  # (its commit failed, or the process died first)
    kv.rocks.close()  # no clean marker


def test_a_crashed_store_replays_only_the_tail_after_its_committed_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p0"
    crashed_store(path)
    log = FakeChangelog([(2, QUEUED, b"v"), (3, LEASE, None), (4, PAUSE, None), (5, b"Snew5", b"v")])
    log.install(monkeypatch)
    kv, replayed, applied = open_partition(path, {}, "state", 0, now=T + 3600)
    try:
        assert log.starts == [3] and replayed == 3 and applied == 5
        assert kv.get(LEASE) is None and kv.get(PAUSE) is None and kv.get(QUEUED) == b"v"
        assert kv.get(b"Snever") is None, "a write that never committed"
        assert local_copy(kv) == LocalCopy(5, T + 3600)  # complete up to the restore's end
    finally:
        kv.close()


def test_a_crashed_store_older_than_the_retention_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p0"
    crashed_store(path)
    log = FakeChangelog([(2, QUEUED, b"v"), *((o, b"Snew%d" % o, b"v") for o in range(5, 10))])
    log.install(monkeypatch)
    kv, replayed, _ = open_partition(path, {}, "state", 0, now=T + 2 * DAY)
    try:
        assert log.starts == [OFFSET_BEGINNING] and replayed == 6
        assert kv.get(LEASE) is None and kv.get(PAUSE) is None, "deletes resurrected"
    finally:
        kv.close()


def test_a_store_without_any_marker_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p0"
    kv = RocksKV(path)
    kv.put(LEASE, b"v")  # a restore that died before its end
    kv.close()
    log = FakeChangelog([(5, b"Snew5", b"v")])
    log.install(monkeypatch)
    kv, _, _ = open_partition(path, {}, "state", 0, now=T)
    try:
        assert log.starts == [OFFSET_BEGINNING] and kv.get(LEASE) is None
    finally:
        kv.close()


def killed(script: str, path: Path) -> None:
    """Run ``script`` (``kv``: a RocksKV at ``path``) in a process that is then killed (SIGKILL)."""
    code = (
        textwrap.dedent(
            """
        import os, signal, sys
        from pathlib import Path
        from frontier.service.pending import Pending
        from frontier.service.rocks import RocksKV
        kv = RocksKV(Path(sys.argv[1]))
        """
        )
        + textwrap.dedent(script)
        + "\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr.decode()


def test_a_kill_keeps_the_committed_batches_and_never_a_marker_without_the_restore(tmp_path: Path) -> None:
    path = tmp_path / "p0"
    killed(
        """
        kv.write_many([(b"R%05d" % i, b"restored") for i in range(20000)])  # a restore: no log
        store = Pending(kv)
        store.put(b"Sa", b"1")
        store.committed([store.seal()], 20000)
        store.put(b"Sb", b"2")
        store.committed([store.seal()], 20001)
        store.put(b"Sc", b"never committed")
        kv.put(b"\\x00clean-offset", b"20001")  # a clean close cut short (no log)
        """,
        path,
    )
    kv = RocksKV(path)
    try:
        copy = local_copy(kv)
        assert copy is not None and copy.offset == 20001 and kv.get(COMMITTED_KEY) == b"20001"
        assert kv.get(b"Sa") == b"1" and kv.get(b"Sb") == b"2" and kv.get(b"Sc") is None
        assert sum(1 for _ in kv.scan(b"R")) == 20000, "a marker kept without the records before it"
    finally:
        kv.close()
    killed("kv.put(b'Sd', b'after a recovery, no log')", path)  # the log replayed at the open stays
    kv = RocksKV(path)
    try:
        assert kv.get(b"Sb") == b"2" and local_copy(kv) is not None
    finally:
        kv.close()
