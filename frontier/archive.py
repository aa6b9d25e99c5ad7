"""WARC output: fetched pages from ``crawl.pages`` as WARC/1.1 files (ISO 28500), written with
warcio (the Webrecorder project's library, made for it), one gzip member per record, rotated by
size: ``crawl-frontier pages --warc DIR``.

Each fetched page becomes a ``request`` record and a ``response`` record (``WARC-Concurrent-To``
each other), with ``WARC-Date`` the fetch time, block and payload digests (SHA-1, computed by
warcio) and ``WARC-Truncated: length`` when the worker cut the body. Every file begins with a
``warcinfo`` record naming the software.

What a page record does not carry is said, not invented:

- the request record is the request the built-in fetcher sends (``GET``, ``Host``, the
  configured ``User-Agent``, the conditional headers of a revisit); a custom fetcher may have
  sent other headers;
- the body is what the worker kept: already decoded from any ``Content-Encoding`` (the HTTP
  client decodes it), so ``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length``
  are kept as ``X-Crawler-*`` and ``Content-Length`` is the body's, as web archives do for
  decoded payloads;
- a revisit that found the page unchanged (``Page.unchanged``: a 304, or the same body digest)
  becomes a ``revisit`` record (WARC/1.1's ``server-not-modified`` or ``identical-payload-digest``
  profile) after its request, with no body;
- pages that were not fetched (``error``, ``disallowed``, ``skipped``) have no HTTP exchange to
  record: they are counted, not written.
"""

from __future__ import annotations

import datetime as dt
import io
from http import HTTPStatus
from importlib import metadata
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from topics.schemas import Page

DEFAULT_MAX_BYTES = 1_000_000_000  # the customary ~1 GB per WARC file
RENAMED = ("content-encoding", "transfer-encoding", "content-length")  # describe the bytes as sent, not as kept


class WarcFiles:
    """Writes pages into ``directory`` as ``<prefix>-<UTC time>-<n>.warc.gz`` files of at most about
    ``max_bytes`` each (a file is closed once it reaches the size; a record is never split)."""

    def __init__(self, directory: Path, user_agent: str, max_bytes: int = DEFAULT_MAX_BYTES,
                 prefix: str = "crawl") -> None:  # fmt: skip
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.directory = directory
        self.user_agent = user_agent
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.files: list[Path] = []
        self.written = 0  # pages written
        self.skipped = 0  # pages with no HTTP exchange (error, disallowed, skipped)
        self._out: IO[bytes] | None = None
        self._writer: WARCWriter | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, page: Page) -> bool:
        """Write one page (True), or count it as having no exchange to record (False)."""
        if page.outcome != "fetched" or page.status <= 0:
            self.skipped += 1
            return False
        writer = self._current()
        request, response = self._records(writer, page) if not page.unchanged else self._revisit(writer, page)
        writer.write_record(request)
        writer.write_record(response)
        self.written += 1
        assert self._out is not None
        if self._out.tell() >= self.max_bytes:
            self._close_file()
        return True

    def close(self) -> None:
        self._close_file()

    def __enter__(self) -> WarcFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- files ------------------------------------------------------------------------------------
    def _current(self) -> WARCWriter:
        if self._writer is not None:
            return self._writer
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S")
        path = self.directory / f"{self.prefix}-{stamp}-{len(self.files):05d}.warc.gz"
        self._out = path.open("xb")
        self._writer = WARCWriter(self._out, gzip=True, warc_version="1.1")
        self.files.append(path)
        info = {"software": f"kafka-crawl-frontier/{_version()} (warcio)", "format": "WARC File Format 1.1",
                "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
                "http-header-user-agent": self.user_agent}  # fmt: skip
        self._writer.write_record(self._writer.create_warcinfo_record(path.name, info))
        return self._writer

    def _close_file(self) -> None:
        if self._out is not None:
            self._out.close()
        self._out, self._writer = None, None

    # -- records ----------------------------------------------------------------------------------
    def _records(self, writer: WARCWriter, page: Page) -> tuple[object, object]:
        date = _warc_date(page.fetched_at)
        parts = urlsplit(page.url)
        target = _one_line((parts.path or "/") + (f"?{parts.query}" if parts.query else ""), space="%20")
        asked = [("Host", parts.netloc), ("User-Agent", self.user_agent), ("Accept-Encoding", "gzip, deflate")]
        sent = page.meta.get("sent_headers")
        asked += [(str(k), str(v)) for k, v in (sent.items() if isinstance(sent, dict) else ())]
        asked = [(_name(k), _one_line(v)) for k, v in asked]
        request_headers = StatusAndHeaders(f"GET {target} HTTP/1.1", asked, is_http_request=True)
        request = writer.create_warc_record(page.url, "request", payload=io.BytesIO(b""), length=0,
                                            http_headers=request_headers,
                                            warc_headers_dict={"WARC-Date": date})  # fmt: skip
        headers = [
            (_name(f"X-Crawler-{k}" if k.lower() in RENAMED else k), _one_line(v)) for k, v in page.headers.items()
        ]
        headers.append(("Content-Length", str(len(page.body))))
        response_headers = StatusAndHeaders(f"{page.status} {_reason(page.status)}", headers, protocol="HTTP/1.1")
        extra = {"WARC-Date": date, "WARC-Concurrent-To": request.rec_headers.get_header("WARC-Record-ID")}
        if page.truncated:
            extra["WARC-Truncated"] = "length"
        response = writer.create_warc_record(page.url, "response", payload=io.BytesIO(page.body),
                                             length=len(page.body), http_headers=response_headers,
                                             warc_headers_dict=extra)  # fmt: skip
        request.rec_headers.add_header("WARC-Concurrent-To", response.rec_headers.get_header("WARC-Record-ID"))
        return request, response

    def _revisit(self, writer: WARCWriter, page: Page) -> tuple[object, object]:
        """An unchanged revisit (no body kept): its request and a ``revisit`` record, profile
        ``server-not-modified`` for a 304, ``identical-payload-digest`` for a body the same as the
        last one's (``WARC-Payload-Digest``: that body's; no earlier record is named, the writer
        may not have seen it)."""
        request, response = self._records(writer, page)
        same_body = page.status != 304 and page.digest.startswith("sha1:")
        profile = "identical-payload-digest" if same_body else "server-not-modified"
        headers = {"WARC-Date": response.rec_headers.get_header("WARC-Date"),  # type: ignore[attr-defined]
                   "WARC-Concurrent-To": request.rec_headers.get_header("WARC-Record-ID"),  # type: ignore[attr-defined]
                   "WARC-Profile": f"http://netpreserve.org/warc/1.1/revisit/{profile}",
                   "WARC-Refers-To-Target-URI": page.url}  # fmt: skip
        if same_body:
            headers["WARC-Payload-Digest"] = page.digest
        http = response.http_headers  # type: ignore[attr-defined]
        http.remove_header("Content-Length")
        revisit = writer.create_warc_record(page.url, "revisit", payload=io.BytesIO(b""), length=0, http_headers=http,
                                            warc_headers_dict=headers)  # fmt: skip
        request.rec_headers.replace_header("WARC-Concurrent-To", revisit.rec_headers.get_header("WARC-Record-ID"))  # type: ignore[attr-defined]
        return request, revisit


def _one_line(value: str, space: str = " ") -> str:
    """A header value (or request target) as one line: CR, LF and the other control characters,
    which would start a header of their own in the record, become ``space``. The values come from
    a submitter's meta (``sent_headers``) and from the sites: anyone's."""
    return "".join(space if ch < " " or ch == "\x7f" or (space != " " and ch == " ") else ch for ch in value)


def _name(name: str) -> str:
    """A header name as a token: anything else (controls, separators, spaces) becomes ``-``."""
    return "".join(ch if ch.isascii() and (ch.isalnum() or ch in "!#$%&'*+-.^_`|~") else "-" for ch in name) or "-"


def _warc_date(epoch: float) -> str:
    """WARC/1.1's date: UTC, ISO 8601, with fractions of a second (W3C-DTF)."""
    when = dt.datetime.fromtimestamp(epoch if epoch > 0 else 0.0, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _version() -> str:
    try:
        return metadata.version("kafka-crawl-frontier")
    except metadata.PackageNotFoundError:
        return "unknown"
