"""URLFrontier throughput: URLs per second through any URLFrontier 2.6 gRPC service (the
crawler-commons API, ``workers/urlfrontier/proto``), put in and got out, target by target.

Targets: services given as ``--target``, and those this program starts itself and stops at the
end (even on an error, Ctrl-C or SIGTERM: their process groups are killed):

- ``--start-gateway``: this repository's gateway over the Kafka frontier, with its own LocalKafka
  broker, topics, one frontier instance and the gateway (``crawl-frontier urlfrontier``), in a
  temporary folder (``--workdir`` keeps it: ``gateway/stack/gateway.log`` and ``frontier.log``).
  ``robots_obey`` is off (the hosts are fake names never fetched). ``--delay S`` sets the hosts'
  politeness delay (``throttle.delay`` and AutoThrottle's ``start_delay``); by default a host's
  delay is AutoThrottle's start delay (1 s), which the gateway's URLs never move;
- ``--start-reference``: the reference service (crawler-commons url-frontier 2.6, RocksDB) through
  ``--reference-script`` (``reference.sh PORT DATA_DIR``, run in the foreground, a fresh data folder).

Each round on a target: DeleteCrawl of the crawl used (so that it starts empty; the benchmark is
destructive: it deletes the default crawl unless ``--crawl`` is given), then

- put: N URLs (``--urls``) over H hosts (``--hosts``), ``http://h{i}.bench.invalid/p{j}`` (never
  resolved nor fetched: the services only store them), as DiscoveredURLItems on ONE PutURLs stream
  fed by a generator; the AckMessages are counted by status (OK, SKIPPED, FAIL). Figure: URLs
  acked per second, from the first send to the stream's completion;
- get: GetURLs (max_urls_per_queue ``--per-queue``, max_queues 0 = all, delay_requestable 600)
  called again and again until every URL put came back once, or ``--get-timeout`` passed, or
  ``--max-calls`` calls were made. With ``--complete`` (the default) the client behaves like a
  crawler: it sends a KnownURLItem (refetchable_from_date 0: done, never again) for every URL got,
  on one PutURLs stream kept open for the phase, and waits for their acks before it asks again.
  ``--update-when url`` (the default) sends each update as soon as its URL is read, while the call
  goes on; ``--update-when call`` sends all of a call's once the call has ended. ``--update-streams
  N`` deals the updates out among N such streams side by side (a crawler's fetchers reporting at
  once). Figure: URLs received per second, over the time until every URL came back (the last new
  one) or, when some did not, the whole phase; with how many came back, how many updates were
  acked, how many calls were made and the most URLs one call gave out for a single queue. Without
  ``--complete`` nothing is sent back: a service which counts the URLs in flight against
  max_urls_per_queue (the reference does) gives out at most ``--per-queue`` URLs per host in a
  run, and a polite one (the gateway) one per host.

What bounds the get figure differs by service. The reference hands out whatever is queued, up to
max_urls_per_queue per queue per call, without pacing the hosts. The gateway hands out what the
frontier dispatches: one URL per host at a time (per-host concurrency 1, the default), held until
the client's update for it, and a host's sends at least its delay apart. With H hosts and delay D
it gives at most about H URLs per (D + round trip), and a run with P URLs per host lasts at least
(P - 1) * D seconds; the header line says both for a started gateway. A URL's round trip is its
hand-out, the client's update, the report to the frontier and the host's next dispatch back to
the gateway. A GetURLs of the gateway that gave URLs stays open up to ``urlfrontier.get_stream``
(5 s) to send the hosts' next URLs as they come due: a client that sends its updates only once the
call has ended (``--update-when call``) holds them back meanwhile and gets one URL per host per
call; ``--update-when url`` (the default) sends each update as soon as its URL is read, as a
crawler that fetches while it reads (StormCrawler) does. Figures: docs/BENCHMARKS.md.

Then the round's crawl is deleted again (not timed) unless ``--keep``.

With several targets and ``--rounds`` > 1 the targets alternate (A B, B A, A B, ...) so that the
machine's drift weighs on each alike. Each phase also shows the CPU seconds this client spent in it
(all its threads): near the phase's wall time, the figure is the client's ceiling as much as the
service's (one Python gRPC stream costs roughly 70 us of client CPU per URL put and acked). A
started service runs on the same machine as the client and shares its cores. Beside each result,
calibration: the speed of a fixed CPU task (building, serialising and parsing URLItems, the
client's own share of the work) relative to its first run in this invocation (1.00 = as fast;
0.80 = the machine is 20 % slower now), and the 1-minute load average. The summary gives each
target's medians.

GetURLs' crawlID: the reference (2.6) stores the default crawl as "DEFAULT" and does not normalise
the crawlID of GetURLs, so crawlID "" gets nothing from it; the default crawl is therefore asked for
as "DEFAULT" (``--get-crawl-id`` sends any other value as is, "" included). The updates carry the
URLInfo as GetURLs gave it.

    python tests/bench/urlfrontier_throughput.py --start-gateway --start-reference [--delay S]
        [--target [NAME=]HOST:PORT ...] [--rounds N] [--warmup N] [--urls N] [--hosts H] [--per-queue N]
        [--[no-]complete] [--update-when url|call] [--update-streams N] [--get-timeout S] [--crawl PREFIX]
        [--workdir DIR] [--json]

Exit code 0 when it ran, 1 (with a one-line error, and the tails of a started service's logs) when
a target cannot be started, reached or fails a call, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import grpc

from deploy.kafka import LocalKafka, free_port, port_open
from frontier.config.settings import AutoThrottleSettings, ScopeSettings
from frontier.demo.stack import Stack
from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg

BENCH = "urlfrontier_throughput"
DEFAULT_CRAWL = "DEFAULT"  # how the services name the crawl of crawlID ""
DELAY_REQUESTABLE = 600  # seconds: long enough that no URL is handed out twice during a run
CALIBRATION_ITEMS = 20_000
REFERENCE_SCRIPT = os.environ.get("URLFRONTIER_REFERENCE", "/work/shared/urlfrontier/reference.sh")
# a started gateway's host delay without --delay: AutoThrottle starts there (never below the floor),
# and the gateway's URLs never move it (their latency is not a server's)
DEFAULT_HOST_DELAY = max(ScopeSettings().delay, AutoThrottleSettings().start_delay)
STOP_TIMEOUT = 20.0  # seconds a started process gets after SIGTERM before SIGKILL
LOG_FINDINGS = re.compile(r"\b(WARNING|ERROR|CRITICAL|Traceback|Exception)\b")


class BenchError(Exception):
    """A target could not be reached or failed a call: reported on one line, exit code 1."""


@dataclass(frozen=True)
class Target:
    name: str
    address: str
    host_delay: float | None = None  # a started gateway's per-host delay (s); None: not known here


@dataclass(frozen=True)
class PutResult:
    sent: int
    ok: int
    skipped: int
    fail: int
    seconds: float
    cpu: float  # CPU seconds of this process (all its threads, gRPC's included) during the phase
    note: str

    @property
    def acked(self) -> int:
        return self.ok + self.skipped + self.fail

    @property
    def rate(self) -> float:
        return self.acked / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class GetResult:
    wanted: int
    received: int  # distinct URLs of this round's set
    duplicates: int  # URLs of the set received again
    foreign: int  # URLs not put in this round
    calls: int
    empty_calls: int
    max_per_queue_call: int  # the most URLs one call gave out for one queue
    seconds: float  # from the first call to the last new URL (all came back), else the whole phase
    cpu: float  # CPU seconds of this process during the phase
    updates_sent: int  # KnownURLItems sent back (--complete)
    updates_ok: int  # ... acked OK (by the end of the phase's update stream)
    note: str

    @property
    def rate(self) -> float:
        return self.received / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class RoundResult:
    target: Target
    round: int
    crawl: str
    deleted: int
    delete_seconds: float
    put: PutResult
    get: GetResult
    calibration: float
    load: float


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def urls_for(n: int, hosts: int) -> list[str]:
    """``n`` distinct URLs spread evenly over ``hosts`` hosts, the hosts interleaved."""
    return [f"http://h{k % hosts}.bench.invalid/p{k // hosts}" for k in range(n)]


def discovered(urls: Sequence[str], crawl_id: str) -> list[pb.URLItem]:
    return [pb.URLItem(discovered=pb.DiscoveredURLItem(info=pb.URLInfo(url=u, crawlID=crawl_id))) for u in urls]


def calibration_seconds(repeats: int = 5) -> float:
    """Median seconds of a fixed CPU task: build, serialise and parse back CALIBRATION_ITEMS URLItems."""
    urls = urls_for(CALIBRATION_ITEMS, 97)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for item in discovered(urls, ""):
            pb.URLItem.FromString(item.SerializeToString())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def parse_target(spec: str) -> Target:
    name, sep, address = spec.partition("=")
    if not sep:
        name, address = spec, spec
    host, colon, port = address.rpartition(":")
    if not name or not host or not colon or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--target {spec!r}: expected HOST:PORT or NAME=HOST:PORT")
    return Target(name=name, address=address)


def connect(target: Target, timeout: float) -> tuple[grpc.Channel, pbg.URLFrontierStub]:
    channel = grpc.insecure_channel(target.address)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        channel.close()
        raise BenchError(f"target {target.name} ({target.address}) cannot be reached within {timeout:g} s") from None
    return channel, pbg.URLFrontierStub(channel)  # type: ignore[no-untyped-call]  # generated, untyped


# -- services started by this program ---------------------------------------------------------------
def _die_with_parent() -> None:
    """In the child: SIGTERM when this program dies, even by SIGKILL (Linux PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def stop_group(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM to the process group of ``proc`` (a session leader), SIGKILL after ``timeout``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class Services:
    """What this program started, each stopped on :meth:`close` (the last started first)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stack = contextlib.ExitStack()
        self.logs: dict[str, Path] = {}  # name → log file of a started process
        self._workdir: Path | None = None

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            if self.args.workdir:
                self._workdir = Path(self.args.workdir).resolve()
                self._workdir.mkdir(parents=True, exist_ok=True)
            else:  # removed last, once every process is stopped
                tmp = tempfile.TemporaryDirectory(prefix="uf-bench-", ignore_cleanup_errors=True)
                self._workdir = Path(self.stack.enter_context(tmp))
        return self._workdir

    def close(self) -> None:
        """Stop everything started; Ctrl-C and SIGTERM are ignored meanwhile (so that it ends)."""
        if self.logs:
            print("stopping the started services", file=sys.stderr, flush=True)
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.stack.close()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def findings(self, limit: int = 8) -> list[str]:
        """Warning and error lines of the started processes' logs (the first ``limit`` of each)."""
        out: list[str] = []
        for path in self.logs.values():
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            found = [ln for ln in lines if LOG_FINDINGS.search(ln)]
            if found:
                out.append(f"{path.name}: {len(found)} warning/error line(s) of {len(lines)}, the first:")
                out.extend(f"  {ln[:300]}" for ln in found[:limit])
        return out

    def tails(self, lines: int = 15) -> list[str]:
        out: list[str] = []
        for name, path in self.logs.items():
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name}: the last {len(text)} lines of {path}")
                out.extend(text)
        return out


def wait_ready(target: Target, timeout: float, check: Callable[[], None]) -> float:
    """Seconds until ``target`` answers gRPC; ``check`` raises BenchError if its process died."""
    started = time.monotonic()
    deadline = started + timeout
    host, _, port = target.address.rpartition(":")
    while not port_open(int(port), host):  # a plain TCP probe: a gRPC channel's reconnect backoff grows
        check()
        if time.monotonic() >= deadline:
            raise BenchError(f"{target.name} does not listen on {target.address} after {timeout:g} s")
        time.sleep(0.3)
    channel, _ = connect(target, max(1.0, deadline - time.monotonic()))
    channel.close()
    return time.monotonic() - started


def start_reference(services: Services, args: argparse.Namespace) -> Target:
    script = Path(args.reference_script)
    if not script.is_file():
        raise BenchError(f"--start-reference: no script {script} (--reference-script, or URLFRONTIER_REFERENCE)")
    work = services.workdir / "reference"
    (work / "data").mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = work / "reference.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(["bash", str(script), str(port), str(work / "data")], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent)  # fmt: skip
    services.stack.callback(stop_group, proc)
    services.logs["reference"] = log_path
    target = Target(name="reference", address=f"127.0.0.1:{port}")

    def check() -> None:
        if proc.poll() is not None:
            raise BenchError(f"the reference service exited with code {proc.returncode} (log: {log_path})")

    seconds = wait_ready(target, args.start_timeout, check)
    print(f"started reference: {script} on {target.address} (pid {proc.pid}), ready in {seconds:.1f} s",
          flush=True)  # fmt: skip
    return target


def start_gateway(services: Services, args: argparse.Namespace) -> Target:
    work = services.workdir / "gateway"
    started = time.monotonic()
    kafka = LocalKafka(home=work / "kafka", port=free_port(), controller_port=free_port())
    services.stack.callback(kafka.down)  # also when up() fails half way (down() stops whatever runs)
    try:
        kafka.up(timeout=args.start_timeout)
    except RuntimeError as e:  # KafkaError
        raise BenchError(f"--start-gateway: the Kafka broker did not start: {str(e)[:300]}") from e
    delay = DEFAULT_HOST_DELAY if args.delay is None else args.delay
    throttle = {} if args.delay is None else {"delay": args.delay, "autothrottle": {"start_delay": args.delay}}
    stack = Stack(kafka.bootstrap, work / "stack", partitions=args.gateway_partitions,
                  frontier={"robots_obey": False}, throttle=throttle)  # fmt: skip
    services.stack.callback(stack.stop_all)
    for name in ("frontier", "gateway"):
        services.logs[name] = stack.workdir / f"{name}.log"
    stack.create_topics()
    stack.start_frontier("frontier")
    port = free_port()
    stack.start_gateway("gateway", port)
    target = Target(name="gateway", address=f"127.0.0.1:{port}", host_delay=delay)

    def check() -> None:
        try:
            stack.check_alive()
        except RuntimeError as e:
            raise BenchError(f"--start-gateway: {str(e).splitlines()[0]}") from e

    wait_ready(target, args.start_timeout, check)
    print(f"started gateway: LocalKafka {kafka.bootstrap}, {args.gateway_partitions} partitions, a frontier and "
          f"the gateway on {target.address}, host delay {delay:g} s, ready in {time.monotonic() - started:.1f} s "
          f"(files in {work})", flush=True)  # fmt: skip
    return target


# -- the phases -------------------------------------------------------------------------------------
def delete_crawl(stub: pbg.URLFrontierStub, crawl: str, timeout: float) -> tuple[int, float]:
    started = time.perf_counter()
    deleted = stub.DeleteCrawl(pb.DeleteCrawlMessage(value=crawl), timeout=timeout).value
    return int(deleted), time.perf_counter() - started


def put_phase(stub: pbg.URLFrontierStub, items: Sequence[pb.URLItem], timeout: float) -> PutResult:
    """All ``items`` on one PutURLs stream; acks counted by status until the stream completes."""
    first_send: list[float] = []
    sent = [0]

    def requests() -> Iterator[pb.URLItem]:
        first_send.append(time.perf_counter())
        for item in items:
            sent[0] += 1
            yield item

    statuses: Counter[int] = Counter()
    note = ""
    cpu = time.process_time()
    try:
        for ack in stub.PutURLs(requests(), timeout=timeout):
            statuses[ack.status] += 1
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        note = f"stream cut at its {timeout:g} s deadline"
    ended = time.perf_counter()
    seconds = ended - (first_send[0] if first_send else ended)
    ok, skipped, fail = (statuses[pb.AckMessage.OK], statuses[pb.AckMessage.SKIPPED], statuses[pb.AckMessage.FAIL])
    cpu = time.process_time() - cpu
    return PutResult(sent=sent[0], ok=ok, skipped=skipped, fail=fail, seconds=seconds, cpu=cpu, note=note)


class Updates:
    """One PutURLs stream kept open for a get phase: the KnownURLItems a crawler sends once it
    processed the URLs, fed from a queue; a thread counts the acks."""

    def __init__(self, stub: pbg.URLFrontierStub, timeout: float) -> None:
        self._items: queue.Queue[pb.URLItem | None] = queue.Queue()
        self._cond = threading.Condition()
        self.sent = 0
        self.statuses: Counter[int] = Counter()
        self.error: grpc.RpcError | None = None
        self.ended = False
        self._ended_sent = False
        self._responses = stub.PutURLs(self._requests(), timeout=timeout)
        self._reader = threading.Thread(target=self._read, name="updates-acks", daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[pb.URLItem]:
        while (item := self._items.get()) is not None:
            yield item

    def _read(self) -> None:
        try:
            for ack in self._responses:
                with self._cond:
                    self.statuses[ack.status] += 1
                    self._cond.notify_all()
        except grpc.RpcError as e:
            with self._cond:
                self.error = e
        finally:
            with self._cond:
                self.ended = True
                self._cond.notify_all()

    @property
    def acked(self) -> int:
        return sum(self.statuses.values())

    def send(self, items: Sequence[pb.URLItem]) -> None:
        with self._cond:
            self.sent += len(items)
        for item in items:
            self._items.put(item)

    def wait(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` s) until every item sent is acked; False if not (or the stream ended)."""
        with self._cond:
            self._cond.wait_for(lambda: self.acked >= self.sent or self.ended, max(0.0, timeout))
            return self.acked >= self.sent

    def end(self) -> None:
        """No more items: the stream completes once the service is done with them."""
        if not self._ended_sent:
            self._ended_sent = True
            self._items.put(None)

    def close(self, timeout: float) -> None:
        """End the stream and wait (bounded) for its completion; cancelled past ``timeout``."""
        self.end()
        self._reader.join(timeout)
        if self._reader.is_alive():
            self._responses.cancel()
            self._reader.join(5)


class UpdateStreams:
    """``n`` :class:`Updates` streams side by side (a crawler's fetchers reporting at once): each
    call's updates are dealt out among them, and all their acks awaited."""

    def __init__(self, stub: pbg.URLFrontierStub, timeout: float, n: int) -> None:
        self.streams: list[Updates] = []
        self._next = 0  # the stream the next item goes to (round robin)
        try:
            for _ in range(n):
                self.streams.append(Updates(stub, timeout))
        except BaseException:
            self.close(1.0)
            raise

    @property
    def sent(self) -> int:
        return sum(u.sent for u in self.streams)

    @property
    def acked(self) -> int:
        return sum(u.acked for u in self.streams)

    @property
    def ok(self) -> int:
        return sum(u.statuses[pb.AckMessage.OK] for u in self.streams)

    @property
    def error(self) -> grpc.RpcError | None:
        return next((u.error for u in self.streams if u.error is not None), None)

    def send(self, items: Sequence[pb.URLItem]) -> None:
        n = len(self.streams)
        for i in range(n):
            if part := items[i::n]:
                self.streams[(self._next + i) % n].send(part)
        self._next = (self._next + len(items)) % n

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all([u.wait(deadline - time.monotonic()) for u in self.streams])

    def close(self, timeout: float) -> None:
        """Every stream ended, then each awaited (``timeout`` in all, then cancelled)."""
        for u in self.streams:
            u.end()
        deadline = time.monotonic() + timeout
        for u in self.streams:
            u.close(max(0.0, deadline - time.monotonic()))


def known(info: pb.URLInfo) -> pb.URLItem:
    """The update a crawler sends for a URL it processed: known, refetchable never (0)."""
    return pb.URLItem(known=pb.KnownURLItem(info=info, refetchable_from_date=0))


def get_phase(stub: pbg.URLFrontierStub, urls: Sequence[str], params: pb.GetParams,
              args: argparse.Namespace) -> GetResult:  # fmt: skip
    """GetURLs again and again until every URL came back once, ``--get-timeout`` passed or
    ``--max-calls`` calls were made; a call which gives nothing is followed by a short pause.
    With ``--complete``, each call's URLs are sent back as done (acked) before the next call."""
    wanted = set(urls)
    seen: set[str] = set()
    duplicates = foreign = calls = empty_calls = max_per_queue = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + args.get_timeout
    last_new = started
    note = ""
    finished = False
    updates = UpdateStreams(stub, args.get_timeout + args.close_timeout, args.update_streams) if args.complete else None
    try:
        while len(seen) < len(wanted):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                note = f"stopped after {args.get_timeout:g} s"
                break
            if calls >= args.max_calls:
                note = f"stopped after {calls} calls"
                break
            calls += 1
            per_queue: Counter[str] = Counter()
            done: list[pb.URLItem] = []
            cut_by_timeout = remaining < args.call_timeout
            try:
                for info in stub.GetURLs(params, timeout=min(args.call_timeout, remaining)):
                    per_queue[info.key or urlsplit(info.url).netloc] += 1
                    if updates is not None:
                        if args.update_when == "url":  # processed as it is read
                            updates.send([known(info)])
                        else:
                            done.append(known(info))
                    if info.url not in wanted:
                        foreign += 1
                    elif info.url in seen:
                        duplicates += 1
                    else:
                        seen.add(info.url)
                        last_new = time.perf_counter()
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise
                note = (
                    f"stopped after {args.get_timeout:g} s" if cut_by_timeout else f"call {calls} cut at its deadline"
                )
            if updates is not None and (done or updates.acked < updates.sent):
                updates.send(done)
                if not updates.wait(min(args.call_timeout, max(0.0, deadline - time.perf_counter()))):
                    if updates.error is not None:
                        raise updates.error
                    note = note or f"updates of call {calls} not all acked in time ({updates.acked}/{updates.sent})"
            got = sum(per_queue.values())
            if per_queue:
                max_per_queue = max(max_per_queue, max(per_queue.values()))
            if args.verbose:
                top = max(per_queue.values()) if per_queue else 0
                print(f"    get call {calls} at {time.perf_counter() - started:6.2f} s: {got} URLs from "
                      f"{len(per_queue)} queues (max {top} per queue), {len(seen)}/{len(wanted)} so far",
                      file=sys.stderr, flush=True)  # fmt: skip
            if note:
                break
            if got == 0:
                empty_calls += 1
                time.sleep(max(0.0, min(args.poll_interval, deadline - time.perf_counter())))
        ended = time.perf_counter()
        finished = True
    finally:
        if updates is not None:  # not timed: the last updates' completion (cancelled at once on an error)
            updates.close(args.close_timeout if finished else 0.5)
    if updates is not None and updates.error is not None:
        raise updates.error
    seconds = (last_new if len(seen) == len(wanted) else ended) - started
    return GetResult(wanted=len(wanted), received=len(seen), duplicates=duplicates, foreign=foreign, calls=calls,
                     empty_calls=empty_calls, max_per_queue_call=max_per_queue, seconds=seconds,
                     cpu=time.process_time() - cpu, updates_sent=updates.sent if updates else 0,
                     updates_ok=updates.ok if updates else 0, note=note)  # fmt: skip


def crawl_of(args: argparse.Namespace, target_index: int, round_no: int) -> tuple[str, str, str]:
    """(crawlID of the URLs put, crawl deleted, crawlID asked for by GetURLs)."""
    if args.crawl:
        crawl = f"{args.crawl}-t{target_index}-r{round_no}"
        put_id, delete_id = crawl, crawl
    else:
        put_id, delete_id = "", DEFAULT_CRAWL
    get_id = args.get_crawl_id if args.get_crawl_id is not None else delete_id
    return put_id, delete_id, get_id


def run_round(stub: pbg.URLFrontierStub, target: Target, target_index: int, round_no: int, args: argparse.Namespace,
              urls: Sequence[str], baseline: float) -> RoundResult:  # fmt: skip
    calibration = baseline / calibration_seconds()
    load = os.getloadavg()[0]
    put_id, delete_id, get_id = crawl_of(args, target_index, round_no)
    deleted, delete_seconds = delete_crawl(stub, delete_id, args.delete_timeout)
    items = discovered(urls, put_id)  # built before the clock starts: the figure is the service's
    put = put_phase(stub, items, args.put_timeout)
    params = pb.GetParams(max_urls_per_queue=args.per_queue, max_queues=0, delay_requestable=DELAY_REQUESTABLE,
                          crawlID=get_id)  # fmt: skip
    got = get_phase(stub, urls, params, args)
    if not args.keep:
        delete_crawl(stub, delete_id, args.delete_timeout)  # leave the service as found (not timed)
    return RoundResult(target=target, round=round_no, crawl=delete_id, deleted=deleted, delete_seconds=delete_seconds,
                       put=put, get=got, calibration=calibration, load=load)  # fmt: skip


def measured(stub: pbg.URLFrontierStub, target: Target, target_index: int, round_no: int, args: argparse.Namespace,
             urls: Sequence[str], baseline: float) -> RoundResult:  # fmt: skip
    try:
        return run_round(stub, target, target_index, round_no, args, urls, baseline)
    except grpc.RpcError as e:
        raise BenchError(f"target {target.name} ({target.address}): {e.code().name}: {e.details()}") from e


def line(r: RoundResult, width: int) -> str:
    p, g = r.put, r.get
    put = f"put {p.sent} URLs: {p.rate:.0f} URLs/s (ok {p.ok} skipped {p.skipped} fail {p.fail}"
    put += f", client cpu {p.cpu:.1f} s"
    if p.acked < p.sent:
        put += f", {p.sent - p.acked} not acked"
    put += f"; {p.note})" if p.note else ")"
    get = f"get {g.received}/{g.wanted} in {g.seconds:.1f} s: {g.rate:.0f} URLs/s (calls {g.calls}, "
    get += f"empty {g.empty_calls}, max {g.max_per_queue_call} per queue per call"
    if g.updates_sent:
        get += f", done {g.updates_ok}/{g.updates_sent} acked"
    get += f", client cpu {g.cpu:.1f} s"
    if g.duplicates or g.foreign:
        get += f", {g.duplicates} again, {g.foreign} foreign"
    get += f"; {g.note})" if g.note else ")"
    if g.received == 0 and p.ok:
        get += " [nothing came back: is --get-crawl-id right?]"
    label = f"round {r.round}" if r.round else "warm-up"
    delay = f"  host delay {r.target.host_delay:g} s" if r.target.host_delay is not None else ""
    return (f"{r.target.name:<{width}}  {label}{delay}  {put}  {get}  calibration {r.calibration:.2f}"
            f" (load {r.load:.2f}, deleted {r.deleted} in {r.delete_seconds:.2f} s)")  # fmt: skip


def figures(r: RoundResult, args: argparse.Namespace) -> dict[str, Any]:
    p, g = r.put, r.get
    return {"target": r.target.name, "address": r.target.address, "round": r.round, "crawl": r.crawl,
            "host_delay_s": r.target.host_delay, "complete": args.complete, "update_streams": args.update_streams,
            "update_when": args.update_when,
            "hosts": args.hosts,
            "urls": p.sent, "put_urls_per_s": round(p.rate), "put_ok": p.ok, "put_skipped": p.skipped,
            "put_fail": p.fail, "put_s": round(p.seconds, 3), "put_client_cpu_s": round(p.cpu, 2),
            "get_received": g.received, "get_urls_per_s": round(g.rate), "get_s": round(g.seconds, 3),
            "get_client_cpu_s": round(g.cpu, 2), "get_calls": g.calls, "get_empty_calls": g.empty_calls,
            "get_max_per_queue_call": g.max_per_queue_call, "get_again": g.duplicates, "get_foreign": g.foreign,
            "updates_sent": g.updates_sent, "updates_ok": g.updates_ok,
            "calibration": round(r.calibration, 3), "load_1min": round(r.load, 2),
            "note": "; ".join(n for n in (p.note, g.note) if n)}  # fmt: skip


def report(args: argparse.Namespace, name: str, **values: Any) -> None:
    """As tests/bench/common.py's report(): one JSON line per result (with --json)."""
    if args.json:
        print(json.dumps({"bench": name, "at": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), **values}),
              flush=True)  # fmt: skip


def summary(results: Sequence[RoundResult], targets: Sequence[Target], width: int, args: argparse.Namespace) -> None:
    print("summary (medians over the rounds)")
    first: tuple[float, float] | None = None
    for target in targets:
        mine = [r for r in results if r.target == target]
        put = statistics.median(r.put.rate for r in mine)
        got = statistics.median(r.get.rate for r in mine)
        cal = statistics.median(r.calibration for r in mine)
        back = statistics.median(r.get.received for r in mine)
        delay = f"  host delay {target.host_delay:g} s" if target.host_delay is not None else ""
        text = (f"{target.name:<{width}}  put {put:.0f} URLs/s  get {got:.0f} URLs/s ({back:.0f}/{args.urls} back)"
                f"  calibration {cal:.2f}  rounds {len(mine)}{delay}")  # fmt: skip
        if first is None:
            first = (put, got)
        elif first[0] > 0 and first[1] > 0:
            text += f"  vs {targets[0].name}: put x{put / first[0]:.2f} get x{got / first[1]:.2f}"
        print(text, flush=True)
        report(args, f"{BENCH}_summary", target=target.name, address=target.address, rounds=len(mine),
               put_urls_per_s=round(put), get_urls_per_s=round(got), get_received=back,
               host_delay_s=target.host_delay, complete=args.complete, calibration=round(cal, 3))  # fmt: skip


def bounds(targets: Sequence[Target], args: argparse.Namespace) -> None:
    """What bounds the get figure of each target, as far as this program knows."""
    per_host = math.ceil(args.urls / args.hosts)
    for t in targets:
        if t.host_delay is not None:
            floor = (per_host - 1) * t.host_delay
            ceiling = f", so at most {args.urls / floor:.0f} URLs/s over the run" if floor > 0 else ""
            print(f"bound: {t.name} paces each host (one URL in a client's hands per host, sends >= "
                  f"{t.host_delay:g} s apart): at most ~{args.hosts / t.host_delay if t.host_delay else math.inf:.0f} "
                  f"URLs/s over {args.hosts} hosts, and {per_host} URLs per host take at least {floor:g} s"
                  f"{ceiling}; plus each URL's round trip (GetURLs, update, report, next dispatch)",
                  flush=True)  # fmt: skip
            if not args.complete:
                print(f"note: without --complete, {t.name} gives one URL per host and nothing more until "
                      f"delay_requestable ({DELAY_REQUESTABLE} s) passes", flush=True)  # fmt: skip
        elif t.name == "reference":
            print(f"bound: {t.name} hands out what is queued without per-host pacing, up to --per-queue "
                  f"{args.per_queue} per queue per call", flush=True)  # fmt: skip
    if not args.complete and per_host > args.per_queue:
        print(f"note: {per_host} URLs per host > --per-queue {args.per_queue}: a service which counts the URLs "
              f"in flight against max_urls_per_queue (the reference does) gives out at most {args.per_queue} "
              f"per host until delay_requestable passes (--complete sends them back as done)", flush=True)  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", action="append", default=[], metavar="[NAME=]HOST:PORT",
                   help="a running URLFrontier service to measure (repeatable)")  # fmt: skip
    p.add_argument("--start-gateway", action="store_true",
                   help="start a LocalKafka broker, a frontier and this repository's gateway (target 'gateway'), "
                        "stopped at the end")  # fmt: skip
    p.add_argument("--start-reference", action="store_true",
                   help="start the reference service with --reference-script (target 'reference'), stopped at "
                        "the end")  # fmt: skip
    p.add_argument("--reference-script", default=REFERENCE_SCRIPT,
                   help=f"reference.sh PORT DATA_DIR (default $URLFRONTIER_REFERENCE or {REFERENCE_SCRIPT})",
                   )  # fmt: skip
    p.add_argument("--delay", type=float, default=None,
                   help="with --start-gateway: the hosts' politeness delay in seconds (throttle.delay and "
                        f"autothrottle.start_delay; default: the configuration's, {DEFAULT_HOST_DELAY:g} s)",
                   )  # fmt: skip
    p.add_argument("--gateway-partitions", type=int, default=4, help="with --start-gateway: partitions (default 4)")
    p.add_argument("--start-timeout", type=float, default=300.0,
                   help="seconds for a started service to answer (default 300)")  # fmt: skip
    p.add_argument("--workdir", default="",
                   help="keep the started services' files (logs, broker, state) here (default: a temporary "
                        "folder, removed at the end)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="rounds per target, the targets alternating (default 1)")
    p.add_argument("--warmup", type=int, default=0,
                   help="unmeasured rounds per target first, left out of the summary (default 0)")  # fmt: skip
    p.add_argument("--urls", type=int, default=20_000, help="URLs put per round (default 20000)")
    p.add_argument("--hosts", type=int, default=200, help="hosts they are spread over (default 200)")
    p.add_argument("--per-queue", type=int, default=100, help="GetURLs max_urls_per_queue (default 100)")
    p.add_argument("--complete", action=argparse.BooleanOptionalAction, default=True,
                   help="send each URL got back as done (KnownURLItem, refetchable_from_date 0) before the next "
                        "GetURLs, as a crawler does (default on)")  # fmt: skip
    p.add_argument("--update-streams", type=int, default=1,
                   help="with --complete: PutURLs streams the updates are dealt out among, side by side (default 1)",
                   )  # fmt: skip
    p.add_argument("--update-when", choices=("call", "url"), default="url",
                   help="with --complete: send each update as soon as its URL is read ('url', the default: a "
                        "crawler that fetches while it reads; a GetURLs may stay open to send a host's next URL), "
                        "or all of a call's once the call has ended ('call')")  # fmt: skip
    p.add_argument("--get-timeout", type=float, default=120.0, help="seconds for the get phase (default 120)")
    p.add_argument("--put-timeout", type=float, default=300.0, help="deadline of the PutURLs stream (default 300)")
    p.add_argument("--call-timeout", type=float, default=60.0, help="deadline of each GetURLs call (default 60)")
    p.add_argument("--close-timeout", type=float, default=60.0,
                   help="seconds for the updates' stream to complete after the get phase (default 60)")  # fmt: skip
    p.add_argument("--delete-timeout", type=float, default=120.0, help="deadline of DeleteCrawl (default 120)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to reach a target (default 10)")
    p.add_argument("--max-calls", type=int, default=20_000, help="most GetURLs calls per round (default 20000)")
    p.add_argument("--poll-interval", type=float, default=0.1,
                   help="pause after a GetURLs call which gave nothing (default 0.1 s)")  # fmt: skip
    p.add_argument("--crawl", default="",
                   help="put each round in a crawl of its own, PREFIX-t<target>-r<round> (deleted before the "
                        "round, so empty), instead of the default crawl")  # fmt: skip
    p.add_argument("--get-crawl-id", default=None,
                   help="crawlID sent with GetURLs, as is (default: the round's crawl, DEFAULT for the default one)",
                   )  # fmt: skip
    p.add_argument("--keep", action="store_true", help="leave each round's URLs in the service (default: deleted)")
    p.add_argument("--json", action="store_true", help="also print one JSON line per result")
    p.add_argument("--verbose", action="store_true", help="one line per GetURLs call, on stderr")
    args = p.parse_args(argv)
    for name in ("rounds", "urls", "hosts", "per_queue", "max_calls", "gateway_partitions", "update_streams"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    for name in ("get_timeout", "put_timeout", "call_timeout", "delete_timeout", "connect_timeout", "close_timeout",
                 "start_timeout"):  # fmt: skip
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.delay is not None:
        if not args.start_gateway:
            p.error("--delay is the started gateway's: give --start-gateway")
        if not 0 <= args.delay <= 3600:
            p.error("--delay must be between 0 and 3600 s")
    if not (args.target or args.start_gateway or args.start_reference):
        p.error("nothing to measure: give --target, --start-gateway or --start-reference")
    try:
        args.targets = [parse_target(spec) for spec in args.target]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    started = {"reference"} if args.start_reference else set()
    started |= {"gateway"} if args.start_gateway else set()
    names = [t.name for t in args.targets] + sorted(started)
    if len(set(names)) < len(names):
        p.error("--target: two targets have the same name (a started one is 'gateway' or 'reference'); name them "
                "NAME=HOST:PORT")  # fmt: skip
    return args


def measure(args: argparse.Namespace, targets: Sequence[Target]) -> None:
    width = max(len(t.name) for t in targets)
    stubs: dict[Target, pbg.URLFrontierStub] = {}
    channels: list[grpc.Channel] = []
    try:
        for target in targets:  # all reachable before anything is measured
            channel, stubs[target] = connect(target, args.connect_timeout)
            channels.append(channel)
        baseline = calibration_seconds()
        per_host = math.ceil(args.urls / args.hosts)
        completing = (f"on ({args.update_streams} update stream(s), sent per {args.update_when})" if args.complete
                      else "off")  # fmt: skip
        print(f"{BENCH}: {args.urls} URLs over {args.hosts} hosts ({per_host} per host at most), per-queue "
              f"{args.per_queue}, delay_requestable {DELAY_REQUESTABLE} s, complete {completing}"
              f", get timeout {args.get_timeout:g} s, {args.rounds} round(s) + {args.warmup} warm-up; {machine()}; "
              f"calibration task {baseline * 1000:.0f} ms = 1.00", flush=True)  # fmt: skip
        bounds(targets, args)
        report(args, f"{BENCH}_calibration", calibration_task_ms=round(baseline * 1000, 1),
               load_1min=round(os.getloadavg()[0], 2))  # fmt: skip
        urls = urls_for(args.urls, args.hosts)
        for _ in range(args.warmup):  # not measured: a JVM service compiles its hot paths meanwhile
            for index, target in enumerate(targets):
                print(line(measured(stubs[target], target, index, 0, args, urls, baseline), width), flush=True)
        results: list[RoundResult] = []
        for round_no in range(1, args.rounds + 1):
            order = list(enumerate(targets))
            if round_no % 2 == 0:
                order.reverse()
            for index, target in order:
                result = measured(stubs[target], target, index, round_no, args, urls, baseline)
                results.append(result)
                print(line(result, width), flush=True)
                report(args, BENCH, **figures(result, args))
        summary(results, targets, width, args)
    finally:
        for channel in channels:
            channel.close()


def run(args: argparse.Namespace) -> None:
    services = Services(args)
    try:
        targets: list[Target] = []
        if args.start_reference:
            targets.append(start_reference(services, args))
        if args.start_gateway:
            targets.append(start_gateway(services, args))
        measure(args, [*targets, *args.targets])
        for text in services.findings():  # what a started service said meanwhile
            print(text, file=sys.stderr, flush=True)
    except BenchError:
        for text in services.tails():
            print(text, file=sys.stderr, flush=True)
        raise
    finally:
        services.close()
        if args.workdir and services.logs:
            print(f"files of the started services kept in {services.workdir}", file=sys.stderr, flush=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the started services are stopped on the way out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        run(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted: what was started is stopped", file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
