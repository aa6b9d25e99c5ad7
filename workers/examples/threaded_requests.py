"""A blocking worker on a thread pool, fetching with ``requests`` instead of the built-in aiohttp.

    python -m workers.examples.threaded_requests --config crawl.toml --concurrency 8
    crawl-frontier worker --fetcher workers.examples.threaded_requests:factory

The worker API holds each job until it may be sent and publishes what ``fetch`` returns; the
function only makes the request. ``requests`` does not retry by default and is told not to
follow redirects (a 3xx is a result: its target goes back through the frontier).
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable

import requests

from frontier.config import Config, WorkerConfig
from workers.api import BlockingJob, BlockingJobs, Outcome
from workers.examples.common import options

_local = threading.local()


def session() -> requests.Session:
    """One session per thread (a ``requests.Session`` is not meant to be shared between threads)."""
    if not hasattr(_local, "session"):
        _local.session = requests.Session()
    s: requests.Session = _local.session
    return s


def fetch(job: BlockingJob, agent: str = WorkerConfig.user_agent) -> Outcome:
    """One GET, within the job's timeout in all (``requests`` times each read, not the whole)."""
    deadline = time.time() + job.timeout
    answered = False
    try:
        with session().get(job.url, timeout=job.timeout, allow_redirects=False, stream=True,
                           headers={"User-Agent": agent}) as r:  # fmt: skip
            answered = True
            job.sent()  # the headers are in: the request surely went out
            job.answered(r.status_code, r.headers)  # a 429 + Retry-After closes the host's gate now
            body = bytearray()
            for chunk in r.iter_content(65536):
                body += chunk
                if len(body) > job.max_body_bytes:
                    break
                if time.time() > deadline:
                    return Outcome(error="timeout")  # a body that trickles
            return Outcome(status=r.status_code, headers=dict(r.headers), body=bytes(body),
                           latency=r.elapsed.total_seconds(), done_at=time.time())  # fmt: skip
    except requests.Timeout:
        return Outcome(error="timeout")
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError):
        return Outcome(error="truncated")
    except requests.ConnectionError:
        return Outcome(error="reset" if answered else "connect")


def factory(cfg: Config) -> Callable[[BlockingJob], Outcome]:
    """For the project's worker: ``crawl-frontier worker --fetcher workers.examples.threaded_requests:factory``
    (a plain function: the worker runs it on a thread and hands it a blocking job)."""
    return functools.partial(fetch, agent=cfg.worker.user_agent)


def main() -> None:
    cfg, args = options(__doc__.splitlines()[0])
    with BlockingJobs(cfg, concurrency=args.concurrency) as jobs:
        signal.signal(signal.SIGTERM, lambda *_: jobs.stop())
        jobs.serve(factory(cfg), threads=args.concurrency)


if __name__ == "__main__":
    main()
