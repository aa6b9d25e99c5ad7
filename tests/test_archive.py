"""WARC output (frontier/archive.py), read back with warcio's own reader, digests checked."""

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from frontier.archive import WarcFiles
from topics.schemas import Page

UA = "test-agent/1.0 (+https://example.invalid/bot)"


def _pages(n: int) -> list[Page]:
    out = []
    for i in range(n):
        body = f"<html><body>page {i} é</body></html>".encode() * (i + 1)
        out.append(Page(url=f"http://127.0.0.9:8080/p/{i}?q={i}", status=200, body=body, fetched_at=1_790_000_000.5 + i,
                        headers={"content-type": "text/html; charset=utf-8", "content-encoding": "gzip",
                                 "content-length": "17", "etag": f'"v{i}"'}))  # fmt: skip
    return out


def _records(files: list[Path]) -> list[tuple[str, object]]:
    got = []
    for f in files:
        with f.open("rb") as fh:
            for rec in ArchiveIterator(fh, check_digests="raise"):
                got.append((rec.rec_type, rec, rec.content_stream().read()))
    return got


def test_every_page_is_a_request_and_a_response_that_read_back_whole(tmp_path: Path) -> None:
    pages = _pages(5)
    pages.append(Page(url="http://127.0.0.9:8080/down", outcome="error", error="connect"))
    pages.append(Page(url="http://127.0.0.9:8080/private", outcome="disallowed"))
    pages.append(Page(url="http://127.0.0.9:8080/big", status=200, body=b"x" * 100, truncated=True, fetched_at=1.0))
    with WarcFiles(tmp_path, UA) as warc:
        for p in pages:
            warc.write(p)
    assert warc.written == 6 and warc.skipped == 2 and len(warc.files) == 1
    records = _records(warc.files)
    assert [t for t, _, _ in records] == ["warcinfo"] + ["request", "response"] * 6
    assert records[0][1].rec_headers.get_header("WARC-Filename") == warc.files[0].name  # type: ignore[attr-defined]
    fetched = [p for p in pages if p.outcome == "fetched"]
    for page, (req, resp) in zip(fetched, zip(records[1::2], records[2::2], strict=True), strict=True):
        _, request, _ = req
        _, response, body = resp
        assert request.rec_headers.get_header("WARC-Target-URI") == page.url  # type: ignore[attr-defined]
        assert response.rec_headers.get_header("WARC-Target-URI") == page.url  # type: ignore[attr-defined]
        assert response.rec_headers.get_header("WARC-Concurrent-To") == \
            request.rec_headers.get_header("WARC-Record-ID")  # type: ignore[attr-defined]  # fmt: skip
        line = request.http_headers  # type: ignore[attr-defined]
        assert (line.protocol, line.statusline) == ("GET", page.url.split(":8080", 1)[1] + " HTTP/1.1")
        assert request.http_headers.get_header("User-Agent") == UA  # type: ignore[attr-defined]
        assert response.http_headers.get_statuscode() == "200"  # type: ignore[attr-defined]
        assert body == page.body  # the payload, byte for byte (warcio checked both digests)
        http = response.http_headers  # type: ignore[attr-defined]
        assert http.get_header("Content-Length") == str(len(page.body))
        assert http.get_header("Content-Encoding") is None  # the body is kept decoded: said, not claimed
        assert http.get_header("X-Crawler-Content-Encoding") in ("gzip", None)
        assert response.rec_headers.get_header("WARC-Payload-Digest", "").startswith("sha1:")  # type: ignore[attr-defined]
    last = records[-1][1]
    assert last.rec_headers.get_header("WARC-Truncated") == "length"  # type: ignore[attr-defined]
    assert records[2][1].rec_headers.protocol == "WARC/1.1"  # type: ignore[attr-defined]
    # the ecosystem's own checker (warcio's command line) agrees: every record's digests pass
    check = subprocess.run([str(Path(sys.executable).parent / "warcio"), "check", "-v", *map(str, warc.files)],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert check.returncode == 0 and check.stdout.count("digest pass") == 1 + 2 * 6, check.stdout + check.stderr


def test_files_rotate_by_size_and_each_record_is_its_own_gzip_member(tmp_path: Path) -> None:
    pages = _pages(12)
    with WarcFiles(tmp_path, UA, max_bytes=2_000) as warc:
        for p in pages:
            warc.write(p)
    assert len(warc.files) > 2
    records = _records(warc.files)
    assert sum(t == "warcinfo" for t, _, _ in records) == len(warc.files)  # one per file
    assert [b for t, _, b in records if t == "response"] == [p.body for p in pages]
    raw = warc.files[0].read_bytes()
    members = raw.count(b"\x1f\x8b\x08")
    assert members >= 3 and gzip.decompress(raw).startswith(b"WARC/1.1")


def test_a_size_that_is_not_positive_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        WarcFiles(tmp_path, UA, max_bytes=0)


def test_header_values_from_a_submitter_or_a_site_cannot_add_lines_to_a_record(tmp_path: Path) -> None:
    """A submitter's ``sent_headers`` meta and a page's headers are anyone's: CR/LF in a value (or
    a name) would start a header of its own in the WARC record (issue 37). They stay one line."""
    page = Page(url="http://127.0.0.9:8080/p", status=200, body=b"ok", fetched_at=1.0,
                meta={"sent_headers": {"X-Note": "a\r\nX-Injected: 1", "Bad\r\nName": "v"}},
                headers={"x-site": "b\nX-Forged: 2", "content-type": "text/html"})  # fmt: skip
    with WarcFiles(tmp_path, UA) as warc:
        warc.write(page)
    records = _records(warc.files)
    request, response = records[1][1], records[2][1]
    asked = request.http_headers  # type: ignore[attr-defined]
    told = response.http_headers  # type: ignore[attr-defined]
    assert asked.get_header("X-Injected") is None and told.get_header("X-Forged") is None
    assert asked.get_header("X-Note") == "a  X-Injected: 1" and told.get_header("x-site") == "b X-Forged: 2"
    assert asked.get_header("Bad--Name") == "v"
