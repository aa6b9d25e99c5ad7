"""Submissions as ``crawl-frontier submit`` takes them: the lines of a file (:func:`read_lines`)
and the ``crawl.urls`` record for each (:func:`submission_value`, a URL or a JSON submission
with the command's options added). Pure: no Kafka client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from topics.schemas import DEFAULT_CRAWL


def read_lines(fh: IO[bytes]) -> Iterator[bytes]:
    """The submissions in a file: one per line, blank lines and ``#`` comments skipped."""
    for line in fh:
        line = line.strip()
        if line and not line.startswith(b"#"):
            yield line


def submission_value(
    line: bytes, *, follow: int = 0, recrawl: bool = False, forget: bool = False, crawl: str = DEFAULT_CRAWL,
    revisit: float | str | list[float] = 0.0, sitemap: bool = False, discover_sitemaps: bool = False,
) -> bytes:  # fmt: skip
    """The ``crawl.urls`` record for one URL or JSON submission given on the command line or in a
    file, with the options added. ``follow``, ``revisit``, ``sitemap`` and ``discover_sitemaps``
    apply to bare URLs only (a JSON submission says its own); ``recrawl`` and ``forget`` apply to
    every line, JSON objects included, so a forget never goes out as a plain submission; ``crawl``
    to every line that does not name its own. A line that is not a JSON object goes as a URL (the
    router rejects what is not one, with the reason)."""
    flags: dict[str, Any] = {name: True for name, on in (("recrawl", recrawl), ("forget", forget)) if on}
    named = {"crawl": crawl} if crawl != DEFAULT_CRAWL else {}
    if line.startswith(b"{"):
        if not flags and not named:
            return line
        try:
            obj = json.loads(line)
        except ValueError:
            return line  # not JSON: the router rejects it
        return json.dumps({**named, **obj, **flags}).encode() if isinstance(obj, dict) else line
    extra: dict[str, Any] = {"follow": follow} if follow else {}
    if revisit:
        extra["revisit"] = revisit
    if sitemap:
        extra["sitemap"] = True
    if discover_sitemaps:
        extra["discover_sitemaps"] = True
    extra.update(named)
    if not flags and not extra:
        return line
    return json.dumps({"url": line.decode(errors="replace"), **extra, **flags}).encode()
