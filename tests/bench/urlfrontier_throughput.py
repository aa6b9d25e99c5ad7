"""URLFrontier throughput: URLs per second through any URLFrontier 2.6 gRPC service (the
crawler-commons API, ``workers/urlfrontier/proto``), put in and got out, target by target.

Each round on a target: DeleteCrawl of the crawl used (so that it starts empty; the benchmark is
destructive: it deletes the default crawl unless ``--crawl`` is given), then

- put: N URLs (``--urls``) over H hosts (``--hosts``), ``http://h{i}.bench.invalid/p{j}`` (never
  resolved nor fetched: the services only store them), as DiscoveredURLItems on ONE PutURLs stream
  fed by a generator; the AckMessages are counted by status (OK, SKIPPED, FAIL). Figure: URLs
  acked per second, from the first send to the stream's completion;
- get: GetURLs (max_urls_per_queue ``--per-queue``, max_queues 0 = all, delay_requestable 600)
  called again and again until every URL put came back once, or ``--get-timeout`` passed. Figure:
  URLs received per second (from the first call to the last new URL), with how many came back,
  how many calls were made and the most URLs one call gave out for a single queue. A polite
  service paces its queues: this is reported, not asserted. The URLs got are never acknowledged
  (no KnownURLItem is sent back, as a crawler would once it fetched them): a service which counts
  the URLs in flight against max_urls_per_queue (the reference does) gives out at most
  ``--per-queue`` URLs per host in a run, so the get phase is complete only when URLs/hosts is at
  most ``--per-queue`` (the defaults: 100 and 100).

Then the round's crawl is deleted again (not timed) unless ``--keep``.

With several targets and ``--rounds`` > 1 the targets alternate (A B, B A, A B, ...) so that the
machine's drift weighs on each alike. Each phase also shows the CPU seconds this client spent in it
(all its threads): near the phase's wall time, the figure is the client's ceiling as much as the
service's (one Python gRPC stream costs roughly 70 us of client CPU per URL put and acked). Beside
each result, calibration: the speed of a fixed CPU task (building, serialising and parsing
URLItems, the client's own share of the work) relative to its first run in this invocation
(1.00 = as fast; 0.80 = the machine is 20 % slower now), and the 1-minute load average. The
summary gives each target's medians.

GetURLs' crawlID: the reference (2.6) stores the default crawl as "DEFAULT" and does not normalise
the crawlID of GetURLs, so crawlID "" gets nothing from it; the default crawl is therefore asked for
as "DEFAULT" (``--get-crawl-id`` sends any other value as is, "" included).

    python tests/bench/urlfrontier_throughput.py --target reference=localhost:7071 [--target ours=HOST:PORT]
        [--rounds N] [--warmup N] [--urls N] [--hosts H] [--per-queue N] [--get-timeout S] [--crawl PREFIX] [--json]

Exit code 0 when it ran, 1 (with a one-line error) when a target cannot be reached or fails a call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import grpc

from workers.urlfrontier.proto import urlfrontier_pb2 as pb
from workers.urlfrontier.proto import urlfrontier_pb2_grpc as pbg

BENCH = "urlfrontier_throughput"
DEFAULT_CRAWL = "DEFAULT"  # how the services name the crawl of crawlID ""
DELAY_REQUESTABLE = 600  # seconds: long enough that no URL is handed out twice during a run
CALIBRATION_ITEMS = 20_000


class BenchError(Exception):
    """A target could not be reached or failed a call: reported on one line, exit code 1."""


@dataclass(frozen=True)
class Target:
    name: str
    address: str


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
    seconds: float  # from the first call to the last new URL
    cpu: float  # CPU seconds of this process during the phase
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


def get_phase(stub: pbg.URLFrontierStub, urls: Sequence[str], params: pb.GetParams,
              args: argparse.Namespace) -> GetResult:  # fmt: skip
    """GetURLs again and again until every URL came back once, ``--get-timeout`` passed or
    ``--max-calls`` calls were made; a call which gives nothing is followed by a short pause."""
    wanted = set(urls)
    seen: set[str] = set()
    duplicates = foreign = calls = empty_calls = max_per_queue = 0
    cpu = time.process_time()
    started = time.perf_counter()
    deadline = started + args.get_timeout
    last_new = started
    note = ""
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
        cut_by_timeout = remaining < args.call_timeout
        try:
            for info in stub.GetURLs(params, timeout=min(args.call_timeout, remaining)):
                per_queue[info.key or urlsplit(info.url).netloc] += 1
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
            note = f"stopped after {args.get_timeout:g} s" if cut_by_timeout else f"call {calls} cut at its deadline"
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
    return GetResult(wanted=len(wanted), received=len(seen), duplicates=duplicates, foreign=foreign, calls=calls,
                     empty_calls=empty_calls, max_per_queue_call=max_per_queue, seconds=last_new - started,
                     cpu=time.process_time() - cpu, note=note)  # fmt: skip


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
    get = f"get {g.received} in {g.seconds:.1f} s: {g.rate:.0f} URLs/s (calls {g.calls}, empty {g.empty_calls}, "
    get += f"max {g.max_per_queue_call} per queue per call, client cpu {g.cpu:.1f} s"
    if g.duplicates or g.foreign:
        get += f", {g.duplicates} again, {g.foreign} foreign"
    get += f"; {g.note})" if g.note else ")"
    if g.received == 0 and p.ok:
        get += " [nothing came back: is --get-crawl-id right?]"
    label = f"round {r.round}" if r.round else "warm-up"
    return (f"{r.target.name:<{width}}  {label}  {put}  {get}  calibration {r.calibration:.2f}"
            f" (load {r.load:.2f}, deleted {r.deleted} in {r.delete_seconds:.2f} s)")  # fmt: skip


def figures(r: RoundResult) -> dict[str, Any]:
    p, g = r.put, r.get
    return {"target": r.target.name, "address": r.target.address, "round": r.round, "crawl": r.crawl,
            "urls": p.sent, "put_urls_per_s": round(p.rate), "put_ok": p.ok, "put_skipped": p.skipped,
            "put_fail": p.fail, "put_s": round(p.seconds, 3), "put_client_cpu_s": round(p.cpu, 2),
            "get_received": g.received, "get_urls_per_s": round(g.rate), "get_s": round(g.seconds, 3),
            "get_client_cpu_s": round(g.cpu, 2), "get_calls": g.calls, "get_empty_calls": g.empty_calls,
            "get_max_per_queue_call": g.max_per_queue_call, "get_again": g.duplicates, "get_foreign": g.foreign,
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
        text = (f"{target.name:<{width}}  put {put:.0f} URLs/s  get {got:.0f} URLs/s ({back:.0f}/{args.urls} back)"
                f"  calibration {cal:.2f}  rounds {len(mine)}")  # fmt: skip
        if first is None:
            first = (put, got)
        elif first[0] > 0 and first[1] > 0:
            text += f"  vs {targets[0].name}: put x{put / first[0]:.2f} get x{got / first[1]:.2f}"
        print(text, flush=True)
        report(args, f"{BENCH}_summary", target=target.name, address=target.address, rounds=len(mine),
               put_urls_per_s=round(put), get_urls_per_s=round(got), get_received=back,
               calibration=round(cal, 3))  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", action="append", required=True, metavar="[NAME=]HOST:PORT",
                   help="a URLFrontier service to measure (repeatable)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="rounds per target, the targets alternating (default 1)")
    p.add_argument("--warmup", type=int, default=0,
                   help="unmeasured rounds per target first, left out of the summary (default 0)")  # fmt: skip
    p.add_argument("--urls", type=int, default=20_000, help="URLs put per round (default 20000)")
    p.add_argument("--hosts", type=int, default=200, help="hosts they are spread over (default 200)")
    p.add_argument("--per-queue", type=int, default=100, help="GetURLs max_urls_per_queue (default 100)")
    p.add_argument("--get-timeout", type=float, default=120.0, help="seconds for the get phase (default 120)")
    p.add_argument("--put-timeout", type=float, default=300.0, help="deadline of the PutURLs stream (default 300)")
    p.add_argument("--call-timeout", type=float, default=60.0, help="deadline of each GetURLs call (default 60)")
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
    for name in ("rounds", "urls", "hosts", "per_queue", "max_calls"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    for name in ("get_timeout", "put_timeout", "call_timeout", "delete_timeout", "connect_timeout"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    try:
        args.targets = [parse_target(spec) for spec in args.target]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if len({t.name for t in args.targets}) < len(args.targets):
        p.error("--target: two targets have the same name; name them NAME=HOST:PORT")
    return args


def run(args: argparse.Namespace) -> None:
    targets: list[Target] = args.targets
    width = max(len(t.name) for t in targets)
    stubs: dict[Target, pbg.URLFrontierStub] = {}
    channels: list[grpc.Channel] = []
    try:
        for target in targets:  # all reachable before anything is measured
            channel, stubs[target] = connect(target, args.connect_timeout)
            channels.append(channel)
        baseline = calibration_seconds()
        per_host = math.ceil(args.urls / args.hosts)
        print(f"{BENCH}: {args.urls} URLs over {args.hosts} hosts ({per_host} per host at most), per-queue "
              f"{args.per_queue}, delay_requestable {DELAY_REQUESTABLE} s, get timeout {args.get_timeout:g} s, "
              f"{args.rounds} round(s); {machine()}; calibration task {baseline * 1000:.0f} ms = 1.00",
              flush=True)  # fmt: skip
        if per_host > args.per_queue:
            print(f"note: {per_host} URLs per host > --per-queue {args.per_queue}: a service which counts the URLs "
                  f"in flight against max_urls_per_queue (the reference does) gives out at most {args.per_queue} "
                  f"per host until delay_requestable passes", flush=True)  # fmt: skip
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
                report(args, BENCH, **figures(result))
        summary(results, targets, width, args)
    finally:
        for channel in channels:
            channel.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
