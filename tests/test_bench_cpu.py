"""The benchmarks' CPU accounting (tests/bench/common.py): a process's CPU-seconds from its own
/proc accounting, children included, and the per-1,000-pages figures per role."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.bench.common import calibration, cpu_per_1000, process_cpu_s


def test_a_process_cpu_seconds_grow_while_it_works_and_count_its_children() -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time\nc = subprocess.Popen([sys.executable, '-c', {busy!r}])\n"
                               "print(c.pid, flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE)  # fmt: skip
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 20
        while process_cpu_s(parent.pid) < 0.3:  # the child's busy 0.3 s counted in its parent's tree
            assert time.monotonic() < deadline, process_cpu_s(parent.pid)
            time.sleep(0.05)
    finally:
        os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
    assert process_cpu_s(parent.pid) == 0.0  # gone


def test_cpu_per_1000_pages_by_role_and_summed() -> None:
    before = {"f0": 1.0, "w0": 2.0, "w1": 0.5}
    after = {"f0": 3.0, "w0": 3.0, "w1": 2.5, "router": 1.0}
    got = cpu_per_1000(before, after, pages=500)
    assert got["cpu_s_per_1000_pages_frontier"] == 4.0
    assert got["cpu_s_per_1000_pages_workers"] == 6.0
    assert got["cpu_s_per_1000_pages_router"] == 2.0
    assert got["cpu_s_per_1000_pages_sum"] == 12.0
    assert got["cpu_s"] == {"f0": 2.0, "router": 1.0, "w0": 1.0, "w1": 2.0} and got["cpu_pages"] == 500


def test_calibration_gives_the_task_seconds_and_the_load() -> None:
    got = calibration()
    assert got["calibration_s"] > 0 and got["load_1min"] >= 0
