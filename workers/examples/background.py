"""The seed-004 shape: independent background processes that do work of their own and take crawl
jobs from the frontier in between (``urllib`` from the standard library for HTTP).

    python -m workers.examples.background --config crawl.toml      (start as many as you like)

Each process loops: a unit of its own work, then at most one crawl job if one may be sent now.
The frontier decides when each host may be fetched and adapts the rate to what the servers
answer; the processes need no coordination between them.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import signal
import time
import urllib.error
import urllib.request
from email.message import Message

from workers.api import BlockingJob, BlockingJobs
from workers.examples.common import options

log = logging.getLogger("background")


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a 3xx is a result: its target goes back through the frontier


OPENER = urllib.request.build_opener(NoRedirects)


def fetch(job: BlockingJob, agent: str) -> None:
    request = urllib.request.Request(job.url, headers={"User-Agent": agent})
    started = time.time()
    try:
        response = OPENER.open(request, timeout=job.timeout)
    except urllib.error.HTTPError as answer:  # 3xx, 4xx, 5xx: a response all the same
        response = answer
    except (TimeoutError, urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        job.failed("timeout" if isinstance(reason, TimeoutError) else "connect")
        return
    with response:
        job.sent()  # the headers are in: the request surely went out
        latency = time.time() - started
        headers: Message = response.headers
        job.answered(response.status, dict(headers.items()))
        body = b""
        try:
            while len(body) <= job.max_body_bytes:
                chunk = response.read(65536)
                if not chunk:
                    break
                body += chunk
                if time.time() > started + job.timeout:
                    raise TimeoutError  # a body that trickles: the job's timeout counts in all
        except TimeoutError:
            job.failed("timeout")
            return
        except http.client.IncompleteRead:
            job.failed("truncated")
            return
        except OSError:
            job.failed("reset")
            return
    job.fetched(response.status, dict(headers.items()), body, latency=latency)


def own_work(n: int) -> str:
    """A stand-in for whatever else the process is for."""
    return hashlib.sha256(str(n).encode() * 1000).hexdigest()


def main() -> None:
    cfg, _ = options(__doc__.splitlines()[0])
    done = fetched = 0
    with BlockingJobs(cfg, concurrency=1) as jobs:  # one job at a time, between units of its own work
        signal.signal(signal.SIGTERM, lambda *_: jobs.stop())
        while True:
            own_work(done)
            done += 1
            job = jobs.get(timeout=0.02)
            if job is None:
                if jobs.jobs.stopped:
                    break
                continue
            try:
                with job:  # an exception is reported as an error; an unreported job is released
                    fetch(job, cfg.worker.user_agent)
            except Exception:  # reported (above): one bad job must not end the process's own work
                log.exception("crawl job %s failed", job.url)
            fetched += 1
    log.info("stopped: %d units of own work, %d crawl jobs", done, fetched)


if __name__ == "__main__":
    main()
