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

Anyone who may write ``crawl.urls`` writes the ``scrapy`` meta too, so a job's request is rebuilt
as untrusted input (:class:`RefusedJob` with the reason, the job skipped with it, never fetched):
it is fetched at the job's URL only (the one the frontier paced and the worker API checked: a
``url`` of another scheme, host or port is refused), calls only the spider's own public methods
(or the private callbacks Scrapy's own spider classes give their requests), is of a ``Request``
class this process already imported (nothing is imported), goes through a proxy or from a local
address only when the project allows that value, and downloads at most the project's
``DOWNLOAD_MAXSIZE``.
"""

from __future__ import annotations

import base64
import inspect
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from w3lib.url import safe_url_string

from frontier.core.revisit import spec_of
from topics.schemas import Job, Submission, unencodable
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


# the private callbacks Scrapy's own spider classes give their requests (CrawlSpider's rules,
# SitemapSpider's sitemaps, the default callback of XMLFeedSpider, CSVFeedSpider and every spider)
SCRAPY_CALLBACKS = frozenset({"_parse", "_callback", "_errback", "_parse_sitemap"})
# what scrapy.Spider itself defines is the spider's life, not a callback (``parse`` aside)
_SPIDER_LIFE = frozenset(name for name in dir(Spider) if name != "parse")
DEFAULT_PORTS = {"http": 80, "https": 443}


class UnencodableRequest(ValueError):
    """A request whose meta, cookies or ``cb_kwargs`` cannot be sent to the frontier."""


class RefusedJob(ValueError):
    """A job whose Scrapy request this process will not make (the reason says why)."""


@dataclass(frozen=True)
class Allowed:
    """What a job's request may ask beyond its URL: the proxies (``CRAWL_FRONTIER_ALLOWED_PROXIES``)
    and local addresses (``CRAWL_FRONTIER_ALLOWED_BINDADDRESSES``) its ``proxy`` / ``bindaddress``
    meta may name, and the largest download (``DOWNLOAD_MAXSIZE``; 0: no cap)."""

    proxies: Collection[str] = ()
    bindaddresses: Collection[str] = ()
    max_size: int = 0


def _check(url: str, what: str, values: Any) -> None:
    """Each key of ``values`` must encode as JSON; the first that does not is named."""
    if values is None:
        return
    items = values.items() if isinstance(values, dict) else enumerate(values)
    for key, value in items:
        bad_key = isinstance(values, dict) and not isinstance(key, str)  # JSON would make it a str
        problem = f"a key that is not a str: {key!r}" if bad_key else (_not_json(value) or unencodable(value))
        if problem:
            raise UnencodableRequest(
                f"request {url}: {what} key {key!r} cannot be sent to the frontier ({problem}); "
                "give it JSON values (str, number, bool, None, list, dict with str keys)"
            )


def _not_json(value: Any, depth: int = 0) -> str:
    """Why ``value`` would not come back from JSON as it is ("" when it would; a tuple comes back
    as a list, as Scrapy's own disk queues give it; a subclass of ``str``, ``int``, ``float``,
    ``list`` or ``dict``, such as lxml's link text, as its base type)."""
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
    """The meta a request carries to the frontier: not the add-on's marks nor what Scrapy sets for
    one download (a ``proxy`` that ``HttpProxyMiddleware`` took from the environment is set again
    where the request is fetched)."""
    env_proxy = bool(meta.get("_scheme_proxy"))
    return {k: v for k, v in meta.items()
            if k not in OURS and k not in TRANSIENT and not (env_proxy and k == "proxy")}  # fmt: skip


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
    sub = Submission(url=request.url, priority=request.priority, meta={SCRAPY_META: d}, crawl=crawl,
                     recrawl=request.dont_filter or not plain, redirects=redirects, agent=agent,
                     revisit=revisit)  # fmt: skip
    if problem := unencodable(sub):  # the record as it will be published: refused now, not lost later
        raise UnencodableRequest(f"request {request.url}: cannot be sent to the frontier ({problem})")
    return sub


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url`` as a connection sees it (the host IDNA-encoded, lower case;
    the scheme's default port spelled out); ValueError when it has none."""
    parts = urlsplit(safe_url_string(url))
    scheme, host, port = parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
    if not host:
        raise ValueError(f"no host in {url[:200]!r}")
    return scheme, host, port if port is not None else DEFAULT_PORTS.get(scheme, 0)


def spider_method(spider: Spider, name: Any, what: str) -> Callable[..., Any]:
    """The spider's method a job's request may call: one of its own public methods, or a private
    callback Scrapy's spider classes give their requests; else :class:`RefusedJob`."""
    if not isinstance(name, str) or not name:
        raise RefusedJob(f"{what} {name!r} is not a method name")
    if name not in SCRAPY_CALLBACKS and (name.startswith("_") or name in _SPIDER_LIFE):
        raise RefusedJob(f"{what} {name!r} is not a public method of the spider")
    method = getattr(spider, name, None)
    if not (inspect.ismethod(method) and method.__self__ is spider):
        raise RefusedJob(f"{what} {name!r}: the spider has no such method")
    return method


def request_class(path: Any) -> type[Request]:
    """The ``Request`` subclass named ``module.Name``, only if this process already imported it
    (nothing is imported for a job); else :class:`RefusedJob`."""
    module, _, name = str(path).rpartition(".")
    cls = getattr(sys.modules.get(module), name, None) if module else None
    if not (isinstance(cls, type) and issubclass(cls, Request)):
        raise RefusedJob(f"_class {str(path)[:200]!r} is not a Request class this process imported")
    return cls


def _checked_meta(meta: dict[str, Any], allowed: Allowed) -> dict[str, Any]:
    """A job's meta as its download may use it: ``proxy`` / ``bindaddress`` only as allowed, the
    download's size within the project's cap."""
    proxy = meta.get("proxy")
    if proxy is not None and proxy not in allowed.proxies:
        raise RefusedJob(f"meta proxy {str(proxy)[:200]!r} is not allowed (CRAWL_FRONTIER_ALLOWED_PROXIES)")
    bind = meta.get("bindaddress")
    if bind is not None:
        host = bind[0] if isinstance(bind, list | tuple) and bind else bind
        if not isinstance(host, str) or host not in allowed.bindaddresses:
            raise RefusedJob(f"meta bindaddress {str(bind)[:200]!r} is not allowed "
                             "(CRAWL_FRONTIER_ALLOWED_BINDADDRESSES)")  # fmt: skip
    if allowed.max_size and "download_maxsize" in meta:
        size = meta["download_maxsize"]
        ok = isinstance(size, int) and not isinstance(size, bool) and 0 < size
        meta["download_maxsize"] = min(size, allowed.max_size) if ok else allowed.max_size
    return meta


def to_request(job: Job, spider: Spider, allowed: Allowed | None = None) -> Request:
    """The Scrapy request of a leased job, marked with its lease: made only as :class:`Allowed`
    and the module's text say (else :class:`RefusedJob`, the reason named)."""
    allowed = allowed or Allowed()
    item = job.item
    d = item.meta.get(SCRAPY_META)
    if not isinstance(d, dict):
        request = Request(item.url, priority=item.priority, meta={k: v for k, v in item.meta.items()})
    else:
        request = _rebuilt(item.url, d, spider, allowed)
    for name, value in conditional_headers(item).items():  # a revisit: asked only if changed since
        request.headers.setdefault(name, value)
    request.meta[JOB_KEY] = job.lease
    return request


def _rebuilt(url: str, d: dict[str, Any], spider: Spider, allowed: Allowed) -> Request:
    """``Request.to_dict``'s output back into a request (what ``request_from_dict`` does, checked)."""
    kwargs = dict(d)
    wanted = kwargs.get("url") or url
    try:
        same = isinstance(wanted, str) and origin(wanted) == origin(url)
    except ValueError:
        same = False
    if not same:
        raise RefusedJob(f"url {str(wanted)[:200]!r} is not at the job's origin {url[:200]!r}")
    kwargs["url"] = wanted
    headers = kwargs.pop("headers", None) or []
    grouped: dict[bytes, list[bytes]] = {}
    for pair in headers if isinstance(headers, list) else [headers]:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise RefusedJob(f"headers: {str(pair)[:100]!r} is not a [name, value] pair")
        k, v = (x.encode("latin-1", "replace") for x in pair)
        if k.lower() == b"host":
            continue  # the connection's own host (a Host header could name another site on the server)
        grouped.setdefault(k, []).append(v)
    kwargs["headers"] = grouped
    body64 = kwargs.pop("body64", "")
    kwargs["body"] = base64.b64decode(body64) if isinstance(body64, str) and body64 else b""
    meta = kwargs.get("meta")
    kwargs["meta"] = _checked_meta(dict(meta) if isinstance(meta, dict) else {}, allowed)
    request_cls = request_class(kwargs["_class"]) if "_class" in kwargs else Request
    made = {key: value for key, value in kwargs.items() if key in request_cls.attributes}
    for name in ("callback", "errback"):
        if kwargs.get(name):
            made[name] = spider_method(spider, kwargs[name], name)
        else:
            made.pop(name, None)
    try:
        return request_cls(**made)
    except (TypeError, ValueError) as exc:
        raise RefusedJob(f"{request_cls.__name__}: {exc}"[:300]) from None
