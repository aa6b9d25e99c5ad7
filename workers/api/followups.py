"""What a fetched page leads to: its redirect target and same-site links as new submissions, and
the headers its page is published with. Pure functions; a bad ``Location`` or link is skipped
and logged, never an exception that could stop the job from being reported."""

from __future__ import annotations

import logging
from urllib.parse import urljoin, urlsplit

from w3lib.encoding import html_to_unicode

from topics.schemas import Submission, UrlItem
from workers.api.links import header_nofollow, same_site_links
from workers.api.outcome import FetchResult

log = logging.getLogger("worker")


def decode_html(body: bytes, content_type: str) -> str:
    """The page's text: by its byte-order mark, else the Content-Type charset, else a
    ``<meta charset>`` / http-equiv near the start of the body, else UTF-8 (w3lib)."""
    return html_to_unicode(content_type or None, body)[1]


def absolute_location(page_url: str, location: str) -> str | None:
    """``location`` resolved against ``page_url``; None when it is not a usable URL."""
    try:
        url = urljoin(page_url, location.strip())
        parts = urlsplit(url)
        _ = parts.hostname, parts.port  # raise now for a bad host or port, not downstream
    except ValueError:
        return None
    return url


def page_headers(page_url: str, headers: dict[str, str]) -> dict[str, str]:
    """The headers a page is published with: ``location`` made absolute, so whoever submitted the
    URL learns where it went (also when the target itself is never fetched again: already seen)."""
    location = headers.get("location")
    if location is None:
        return headers
    target = absolute_location(page_url, location)
    return headers if target is None or target == location else {**headers, "location": target}


def redirect(item: UrlItem, r: FetchResult, max_redirects: int) -> Submission | None:
    """The redirect target of a 3xx as a new submission carrying everything the job was given."""
    location = r.headers.get("location")
    if not (300 <= r.status < 400 and location and item.redirects < max_redirects):
        return None
    target = absolute_location(item.url, location)
    if target is None:
        log.warning("redirect of %s not followed: bad Location %r", item.url, location[:200])
        return None
    return Submission(url=target, priority=item.priority, meta=item.meta, follow=item.follow, scopes=item.scopes,
                      redirects=item.redirects + 1, cost=item.cost, autothrottle=item.adjust,
                      revisit=item.passed_on_revisit(), crawl=item.crawl, agent=item.agent, sitemap=bool(item.sitemap),
                      sitemap_for=item.sitemap, sitemap_depth=item.sitemap_depth,
                      discover_sitemaps=item.discover_sitemaps)  # fmt: skip


def links(item: UrlItem, r: FetchResult, agent: str) -> list[Submission]:
    """Same-site links of an HTML page, when the job may follow them and the page allows it; or
    the links user code reported (``r.links``, resolved against the page), within the same budget."""
    if item.follow <= 0:
        return []
    if r.links is not None:
        given = (absolute_location(item.url, link) for link in r.links)
        return [Submission(url=url, priority=item.priority, meta=item.meta, follow=item.follow - 1, scopes=item.scopes,
                           revisit=item.passed_on_revisit(), crawl=item.crawl, agent=item.agent,
                           discover_sitemaps=item.discover_sitemaps)
                for url in dict.fromkeys(given) if url]  # fmt: skip
    if r.status != 200 or "html" not in r.content_type:
        return []
    if header_nofollow(r.headers.get("x-robots-tag", ""), agent):
        return []
    found = same_site_links(item.url, decode_html(r.body, r.content_type), agent)
    return [Submission(url=link, priority=item.priority, meta=item.meta, follow=item.follow - 1, scopes=item.scopes,
                       revisit=item.passed_on_revisit(), crawl=item.crawl, agent=item.agent,
                       discover_sitemaps=item.discover_sitemaps)
            for link in found]  # fmt: skip


def follow_ups(item: UrlItem, r: FetchResult, max_redirects: int, agent: str) -> list[Submission]:
    """Redirect target and links; a part that fails is logged and left out, never raised."""
    out: list[Submission] = []
    try:
        target = redirect(item, r, max_redirects)
        if target is not None:
            out.append(target)
    except Exception:  # one bad Location must never stop the job from being reported
        log.exception("redirect of %s not followed", item.url)
    try:
        out.extend(links(item, r, agent))
    except Exception:  # nor one bad page
        log.exception("links of %s not followed", item.url)
    return out
