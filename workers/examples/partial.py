"""An async worker (``httpx``) that fetches only some jobs and declines the rest.

    python -m workers.examples.partial --config crawl.toml --skip '\\.pdf$'

Jobs whose URL matches ``--skip`` are reported as skipped (a page with outcome ``skipped`` and
the reason; no request, no delay moved); the others are fetched. ``async with job:`` reports an
exception as an error and a job left without a report as released.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time

import httpx

from workers.api import Jobs, LeasedJob
from workers.examples.common import options

NETWORK = {httpx.TimeoutException: "timeout", httpx.ConnectError: "connect", httpx.ReadError: "reset",
           httpx.RemoteProtocolError: "reset"}  # fmt: skip


async def fetch(client: httpx.AsyncClient, job: LeasedJob) -> None:
    async with job:
        started = time.time()
        try:
            async with asyncio.timeout(job.timeout), client.stream("GET", job.url, timeout=job.timeout) as r:
                job.sent()  # the headers are in: the request surely went out
                latency = time.time() - started
                job.answered(r.status_code, r.headers)
                body = b""
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > job.max_body_bytes:
                        break
        except TimeoutError:  # the job's timeout counts in all (httpx times each read)
            await job.failed("timeout")
            return
        except httpx.HTTPError as exc:
            kind = next((name for cls, name in NETWORK.items() if isinstance(exc, cls)), f"client:{type(exc).__name__}")
            await job.failed(kind)
            return
        await job.fetched(r.status_code, r.headers, body, latency=latency)


async def crawl(jobs: Jobs, client: httpx.AsyncClient, skip: re.Pattern[str]) -> None:
    running: set[asyncio.Task[None]] = set()
    async for job in jobs:
        if skip.search(job.url):
            await job.skip(f"not fetched by this worker: matches {skip.pattern}")
            continue
        task = asyncio.create_task(fetch(client, job))
        running.add(task)
        task.add_done_callback(running.discard)
    if running:
        await asyncio.wait(running)


def main() -> None:
    cfg, args = options(__doc__.splitlines()[0], skip=(str, r"\.pdf$", "a regular expression: URLs not fetched"))

    async def run() -> None:
        async with (
            Jobs(cfg, concurrency=args.concurrency) as jobs,
            httpx.AsyncClient(follow_redirects=False, headers={"User-Agent": cfg.worker.user_agent}) as client,
        ):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, jobs.stop)
            await crawl(jobs, client, re.compile(args.skip))

    asyncio.run(run())


if __name__ == "__main__":
    main()
