"""What a job's report becomes, in the protocol's order (docs/PROTOCOL.md): the page and its
follow-ups, acknowledged; then the feedback that closes the lease. A page Kafka refuses becomes a
small error page; when not even that goes out, no feedback (the lease expires, the job comes
back). A follow-up Kafka refuses is lost, counted and said once: the job is reported as an error
(never sent round again to be fetched and refused forever). Also a skipped job's page and
feedback, a hand-back, and the rejection of a job that does not decode.

:class:`Reporter` publishes only: before it is asked, the job has left its slot and its offset is
committed as done (so the partition's next owner never fetches a job whose report landed);
:class:`~workers.api.jobs.Jobs` sees to both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from confluent_kafka import Message

from topics.catalog import Topics
from topics.kafka import coordinates
from topics.schemas import SKIPPED_VERSION, Feedback, Job, Page, Rejected, SchemaError
from workers.api.clock import Clock
from workers.api.followups import follow_ups, page_headers
from workers.api.leased import LeasedJob, Outcome
from workers.api.metrics import WorkerMetrics
from workers.api.outcome import BackoffCodes, is_retryable, throttle_headers
from workers.api.publishing import Publisher
from workers.api.revisits import judge
from workers.api.sitemaps import SitemapError
from workers.api.sitemaps import follow_ups as sitemap_follow_ups

log = logging.getLogger("worker")
# a late signal's lease id: the job's, with this suffix (no lease has it: the frontier applies it as late)
LATE_SUFFIX = "~late"


class Reporter:
    """Publishes reports through ``publisher`` (set by :meth:`Jobs.start
    <workers.api.jobs.Jobs.start>`; tests set it directly) and counts them: ``fetched`` (an
    outcome, fetched or failed), ``skipped``, ``returned`` (handed back); times read on ``clock``."""

    def __init__(
        self,
        topics: Topics,
        name: str,
        agent: str,
        max_redirects: int,
        max_body: Callable[[Job], int],
        backoff_codes: BackoffCodes,
        metrics: WorkerMetrics,
        clock: Clock,
    ) -> None:
        self.clock = clock
        self.topics = topics
        self.name = name
        self.agent = agent
        self.max_redirects = max_redirects
        self.max_body = max_body
        self.backoff_codes = backoff_codes
        self.metrics = metrics
        self.publisher: Publisher
        self.fetched = self.returned = self.skipped = 0

    async def report(self, leased: LeasedJob, outcome: Outcome) -> None:
        """A fetch's outcome (a response, or an error): its page and follow-ups, then the feedback."""
        job = leased.job
        max_body = self.max_body(job)
        if len(outcome.body) > max_body:
            outcome.body, outcome.truncated = outcome.body[:max_body], True
        self.fetched += 1
        self.metrics.observe(
            job.kind, "error" if outcome.error else "fetched", outcome.status, outcome.latency, host=job.item.host
        )
        await self._conclude(leased, outcome)

    async def report_late(self, leased: LeasedJob, outcome: Outcome) -> None:
        """A fetch whose job is another worker's now (its partition moved before the done mark
        was committed): no page, and a feedback the frontier takes as late (a lease id no lease
        has): it closes nothing, but the send time and the server's signals reach the host's
        scopes, so the job's next send keeps its distance from this one."""
        if not outcome.sent_at:
            return
        fb = self._feedback(leased, outcome, "error" if outcome.error else "fetched")
        fb.lease = f"{fb.lease}{LATE_SUFFIX}"
        try:
            await self.publisher.report(fb)
        except Exception as exc:  # noqa: BLE001 - a signal only: the job's new owner reports it
            log.warning("late signal for %s not sent: %s", leased.item.url[:200], exc)

    async def report_skip(self, leased: LeasedJob, reason: str) -> None:
        """Declined without a request: a ``skipped`` page, acknowledged, then the feedback."""
        item = leased.item
        page = Page(v=SKIPPED_VERSION, url=item.url, outcome="skipped", error=reason[:500], meta=item.meta,
                    fetched_at=self.clock.now(), worker=self.name, crawl=item.crawl)  # fmt: skip
        if problem := await self.publisher.deliver(self.topics.pages, page, key=item.url.encode()):
            log.error("%s: skipped page not published (%s); no feedback: the lease expires", item.url, problem)
            return
        self.skipped += 1
        self.metrics.observe(leased.kind, "skipped", 0, 0.0)
        await self.publisher.report(self._feedback(leased, Outcome(), "skipped"))

    async def report_back(self, leased: LeasedJob) -> None:
        """Handed back unfetched (feedback ``expired``): the frontier queues it again."""
        self.returned += 1
        self.metrics.observe(leased.kind, "expired", 0, 0.0)
        await self.publisher.report(self._feedback(leased, Outcome(), "expired"))

    async def report_hold(self, leased: LeasedJob, until: float) -> None:
        """The job stays in hand until ``until`` (feedback ``held``): its lease lasts as long."""
        fb = self._feedback(leased, Outcome(), "held")
        fb.held_until = until
        await self.publisher.report(fb)

    async def _conclude(self, leased: LeasedJob, result: Outcome) -> None:
        """Publish what the fetch produced, then the feedback that closes the lease."""
        job, item = leased.job, leased.item
        page_out = False
        try:
            if job.kind == "robots":
                fb = self._feedback(leased, result, "error" if result.error else "fetched", body=result.body)
                if 300 <= result.status < 400 and "location" in result.headers:
                    fb.headers["location"] = result.headers["location"][:2048]  # the next hop, for the frontier
                await self.publisher.report(fb)
                return
            if is_retryable(result, self.backoff_codes(job)) and job.retries_left > 0:
                await self.publisher.report(self._feedback(leased, result, "retry"))
                return
            same, validators = judge(item, result)
            unchanged = same and result.status in (200, 304)  # the page says so (else it is published whole)
            subs, note = result.follow_ups, ""
            if subs is None and item.sitemap and result.status == 200 and not unchanged:
                try:  # (parsed off the event loop: up to 50 MB of XML)
                    subs, notes = await asyncio.to_thread(sitemap_follow_ups, item, leased.url, result.body,
                                                          result.sent_at or self.clock.now())  # fmt: skip
                except SitemapError as exc:
                    cut = f" (cut at {len(result.body)} bytes: worker.max_body_bytes)" if result.truncated else ""
                    await self._fail(leased, result, f"sitemap: {exc}{cut}")
                    return
                note = "; ".join(f"sitemap: {n}" for n in notes)[:500]
            if subs is None:  # an unchanged page's links were followed at its first fetch
                subs = [] if unchanged else follow_ups(item, result, self.max_redirects, self.agent)
            publish_page = (
                self.publisher.deliver(
                    self.topics.pages,
                    self._page(leased, result, unchanged, validators.get("digest", ""), note),
                    key=item.url.encode(),
                )
                if result.page
                else _nothing()
            )
            if subs:
                page, *followed = await asyncio.gather(
                    publish_page, *(self.publisher.deliver(self.topics.urls, s) for s in subs)
                )
            else:  # the page alone (most jobs): awaited here, not in a task of its own
                page, followed = await publish_page, []
            if page:
                await self._fail(leased, result, f"page_not_published: {page}")
                return
            page_out = True
            if problems := [p for p in followed if p]:
                # never round again (a record Kafka refuses once, it refuses each time): the job is
                # reported with the error, its page (if any) and the other follow-ups are out
                self.metrics.unpublished.inc(len(problems))
                reason = f"follow_ups_not_published: {len(problems)} of {len(subs)} ({problems[0]})"[:500]
                log.error("%s: %s; the job is reported as an error", item.url, reason)
                fb = self._feedback(leased, result, "error", error=reason)
                fb.validators, fb.unchanged = validators, same
                await self.publisher.report(fb)
                return
            fb = self._feedback(leased, result, "error" if result.error else "fetched")
            fb.validators, fb.unchanged = validators, same
            await self.publisher.report(fb)
        except Exception as exc:  # any failure here ends in an "error" result, never in silence
            log.exception("job %s (%s) failed after its fetch", job.lease, item.url)
            reason = f"worker_error: {type(exc).__name__}"
            if page_out or job.kind == "robots":
                await self.publisher.report(self._feedback(leased, result, "error", error=reason))
            else:
                await self._fail(leased, result, reason)

    async def _fail(self, leased: LeasedJob, r: Outcome, reason: str) -> None:
        """The job's page could not be published: publish a small error page instead and report an
        error; when not even that goes out, report nothing (the lease expires, the job comes back)."""
        item = leased.item
        error_page = Page(url=item.url, status=r.status, outcome="error", error=reason, content_type=r.content_type,
                          fetched_at=r.sent_at, latency=r.latency, meta=item.meta, worker=self.name,
                          crawl=item.crawl)  # fmt: skip
        problem = await self.publisher.deliver(self.topics.pages, error_page, key=item.url.encode())
        if problem:
            log.error("%s: no page published (%s), not even an error page (%s); no feedback: the lease expires "
                      "and the job comes back", item.url, reason, problem)  # fmt: skip
            return
        await self.publisher.report(self._feedback(leased, r, "error", error=reason))

    @staticmethod
    def _feedback(leased: LeasedJob, r: Outcome, outcome: str, body: bytes = b"", error: str = "") -> Feedback:
        item, sent = leased.item, outcome not in ("expired", "skipped", "held")
        return Feedback(lease=leased.job.lease, host=item.host, domain=item.domain, ip=item.ip, url=item.url,
                        outcome=outcome, status=r.status, latency=r.latency, sent_at=r.sent_at if sent else 0.0,
                        done_at=r.done_at if sent else 0.0, error=error or r.error,
                        headers=throttle_headers(r.headers), body=body)  # fmt: skip

    def _page(self, leased: LeasedJob, r: Outcome, unchanged: bool = False, digest: str = "",
              note: str = "") -> Page:  # fmt: skip
        """The page record; a revisit that found the page ``unchanged`` says so, without the body;
        ``note``: what a sitemap left out (its ``error``, the outcome still ``fetched``)."""
        url = leased.url
        return Page(
            url=url, status=r.status, outcome="error" if r.error else "fetched", error=r.error or note,
            headers=page_headers(url, r.headers), body=b"" if unchanged else r.body,
            truncated=r.truncated and not unchanged, content_type=r.content_type, fetched_at=r.sent_at,
            latency=r.latency, meta=leased.item.meta, worker=self.name, crawl=leased.item.crawl, unchanged=unchanged,
            digest=digest if unchanged and r.status != 304 else "",
        )  # fmt: skip

    async def reject(self, msg: Message, exc: SchemaError) -> None:
        """A job that does not decode: a rejection with its original on ``crawl.rejected``."""
        topic, partition, offset = coordinates(msg)
        log.error("undecodable job at %s[%d]@%d: %s", topic, partition, offset, exc)
        rejected = Rejected(reason=f"undecodable: {exc}", original=msg.value() or b"", topic=topic,
                            partition=partition, offset=offset)  # fmt: skip
        try:
            await self.publisher.reject(rejected)
        except RuntimeError:
            log.exception("job at %s[%d]@%d: rejection not published", topic, partition, offset)


async def _nothing() -> str:
    """No page to publish (``Outcome.page`` False): nothing went wrong."""
    return ""
