"""A Scrapy request on the frontier's wire and back.

A request a spider yields becomes a :class:`~topics.schemas.Submission` of the spider's crawl whose
``meta["scrapy"]`` holds what Scrapy needs to rebuild it (``Request.to_dict``: method, headers,
body, cookies, callback and errback by name, meta, ``cb_kwargs``, flags, priority, the class), in
JSON: headers as latin-1 pairs, the body in base64. ``dont_filter`` becomes ``recrawl`` (queued
even if seen). ``meta["frontier_revisit"]`` (else the ``CRAWL_FRONTIER_REVISIT`` setting) gives
the request a revisit: seconds, ``"adaptive"``, ``"MIN:MAX"`` or ``[min, max]`` (0: fetched once).
Meta, cookies or ``cb_kwargs`` that JSON cannot carry are refused with :class:`UnencodableRequest`
naming the key: never dropped in silence, never pickled.

A leased job becomes the :class:`scrapy.Request` again (a URL submitted outside Scrapy, with no
``scrapy`` meta, becomes a plain request to the spider's ``parse``), marked with its lease. A
revisit carries the validators its last fetch left (``If-None-Match``, ``If-Modified-Since``): a
304 reaches no callback (Scrapy's ``HttpErrorMiddleware``) and is reported unchanged.
"""

from __future__ import annotations

import base64
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.request import request_from_dict

from frontier.core.revisit import spec_of
from topics.schemas import Job, Submission
from workers.api.revisits import conditional_headers

SCRAPY_META = "scrapy"  # the key of a submission's meta that carries the Scrapy request
REVISIT_META = "frontier_revisit"  # a request's revisit (else the spider's CRAWL_FRONTIER_REVISIT)
JOB_KEY = "_frontier_job"  # on a request made from a job: the job's lease
PARENT_KEY = "_frontier_parent"  # on a request a callback yielded: the lease of the response's job
HANDED_BACK = "_frontier_handed_back"  # on the request a middleware returns only to end a retried job
OURS = frozenset({JOB_KEY, PARENT_KEY, HANDED_BACK})
# what Scrapy's components write into meta for one download only (the next download sets them again)
TRANSIENT = frozenset({"download_latency", "download_slot", "_auth_proxy", "_scheme_proxy", "_dont_cache",
                       "cache_timestamp"})  # fmt: skip


# attributes carried their own way (bytes, callables, checked above), the rest must be JSON as they are
_CARRIED = frozenset({"url", "headers", "body", "meta", "cb_kwargs", "cookies", "callback", "errback"})
# headers Scrapy's middlewares add to a download from the process's state (cookie jar, proxy
# credentials): not carried by a request built from a job's download, and re-added where it is fetched
# (and the conditional headers of a revisit, which are the job's own: a redirect target has its own)
_PER_DOWNLOAD = frozenset({b"cookie", b"proxy-authorization", b"if-none-match", b"if-modified-since"})


class UnencodableRequest(ValueError):
    """A request whose meta, cookies or ``cb_kwargs`` cannot be sent to the frontier."""


def _check(url: str, what: str, values: Any) -> None:
    """Each key of ``values`` must encode as JSON; the first that does not is named."""
    if values is None:
        return
    items = values.items() if isinstance(values, dict) else enumerate(values)
    for key, value in items:
        bad_key = isinstance(values, dict) and not isinstance(key, str)  # JSON would make it a str
        problem = f"a key that is not a str: {key!r}" if bad_key else _not_json(value)
        if problem:
            raise UnencodableRequest(
                f"request {url}: {what} key {key!r} cannot be sent to the frontier ({problem}); "
                "give it JSON values (str, number, bool, None, list, dict with str keys)"
            )


def _not_json(value: Any, depth: int = 0) -> str:
    """Why ``value`` would not come back from JSON as it is ("" when it would; a tuple comes back
    as a list, as Scrapy's own disk queues give it)."""
    if value is None or isinstance(value, str | bool | int):
        return ""
    if isinstance(value, float):
        return "" if value == value and abs(value) != float("inf") else f"{value!r} is not a JSON number"
    if depth > 32:
        return "nested too deep"
    if isinstance(value, list | tuple):
        return next((p for p in (_not_json(v, depth + 1) for v in value) if p), "")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"a dict key {k!r} that is not a str"
            if p := _not_json(v, depth + 1):
                return p
        return ""
    return f"a {type(value).__name__}"


def sendable_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in OURS and k not in TRANSIENT}


def check_request(request: Request) -> None:
    """Raise :class:`UnencodableRequest` unless the request can go to the frontier as it is."""
    _check(request.url, "meta", sendable_meta(request.meta))
    _check(request.url, "cb_kwargs", request.cb_kwargs)
    _check(request.url, "cookies", request.cookies)


def to_submission(
    request: Request, spider: Spider | None, crawl: str, agent: str = "", revisit: float | str | list[float] = 0.0
) -> Submission:
    """The submission that queues ``request`` in ``crawl``, robots.txt matched for ``agent`` (the
    spider's User-Agent), with its ``frontier_revisit`` meta or else ``revisit`` (raises
    :class:`UnencodableRequest`)."""
    check_request(request)
    try:
        revisit = spec_of(request.meta.get(REVISIT_META, revisit))
    except ValueError as exc:
        raise UnencodableRequest(f"request {request.url}: meta {REVISIT_META!r}: {exc}") from None
    try:
        d = request.to_dict(spider=spider)
    except ValueError as exc:  # a callback that is not a method of the spider: no name to send
        raise UnencodableRequest(f"request {request.url}: {exc}") from None
    d["meta"] = sendable_meta(d.get("meta") or {})
    for name in request.attributes:  # flags and any attribute of a Request subclass (JsonRequest's dumps_kwargs, ...)
        if name not in _CARRIED and (problem := _not_json(d.get(name))):
            raise UnencodableRequest(f"request {request.url}: attribute {name!r} cannot be sent to the frontier "
                                     f"({problem})")  # fmt: skip
    derived = JOB_KEY in request.meta  # built from a job's download (a redirect): headers added for it stay
    d["headers"] = [[k.decode("latin-1"), v.decode("latin-1")] for k, vs in request.headers.items() for v in vs
                    if not (derived and k.lower() in _PER_DOWNLOAD)]  # fmt: skip
    body = d.pop("body", b"") or b""
    if body:
        d["body64"] = base64.b64encode(body).decode("ascii")
    d = {k: v for k, v in d.items() if v not in (None, "", [], {}) or k in ("url",)}
    plain = request.method == "GET" and not body
    redirects = int(request.meta.get("redirect_times", 0) or 0)
    return Submission(url=request.url, priority=request.priority, meta={SCRAPY_META: d}, crawl=crawl,
                      recrawl=request.dont_filter or not plain, redirects=redirects, agent=agent,
                      revisit=revisit)  # fmt: skip


def to_request(job: Job, spider: Spider) -> Request:
    """The Scrapy request of a leased job, marked with its lease (raises ValueError when the
    spider has no method of the callback's name any more)."""
    item = job.item
    d = item.meta.get(SCRAPY_META)
    if not isinstance(d, dict):
        request = Request(item.url, priority=item.priority, meta={k: v for k, v in item.meta.items()})
    else:
        kwargs = dict(d)
        kwargs["url"] = item.url if not kwargs.get("url") else kwargs["url"]
        headers = kwargs.pop("headers", None) or []
        grouped: dict[bytes, list[bytes]] = {}
        for k, v in headers:
            grouped.setdefault(str(k).encode("latin-1"), []).append(str(v).encode("latin-1"))
        kwargs["headers"] = grouped
        body64 = kwargs.pop("body64", "")
        kwargs["body"] = base64.b64decode(body64) if body64 else b""
        kwargs["meta"] = dict(kwargs.get("meta") or {})
        request = request_from_dict(kwargs, spider=spider)
    for name, value in conditional_headers(item).items():  # a revisit: asked only if changed since
        request.headers.setdefault(name, value)
    request.meta[JOB_KEY] = job.lease
    return request
