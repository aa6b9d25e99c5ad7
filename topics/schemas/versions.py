"""The wire's schema versions and crawl names: the version a record is written with, the versions
a reader accepts, the default crawl and what may name a crawl (docs/PROTOCOL.md, "Versions").
"""

from __future__ import annotations

# The version a record is written with: 1, unless it uses what version 2 added (a Feedback or Page
# with outcome "skipped"): then 2, so that readers of version 1 keep working in a rolling upgrade.
# Readers accept every version in READABLE_VERSIONS (docs/PROTOCOL.md, "Versions"; the records a
# version-1 writer put on the wire are kept in topics/fixtures/v1 and decoded by a test).
SCHEMA_VERSION = 1
SKIPPED_VERSION = 2  # added the outcome "skipped": a worker declined a job without sending a request
# added crawls: a record that names a crawl other than the default one (a UrlBatch holding such an
# item, its Job, its Page) or a crawl command is marked 3, so that an older reader refuses it
# instead of taking it for the default crawl's
CRAWLS_VERSION = 3
READABLE_VERSIONS = frozenset({1, 2, 3})

DEFAULT_CRAWL = "default"  # the crawl of a URL submitted without one (and of every record written before crawls)
MAX_CRAWL_CHARS = 64  # characters of a crawl name


def valid_crawl(name: str) -> str:
    """``name`` if it may name a crawl (1-64 characters, no control characters, not only spaces),
    else ValueError with the reason (a submission naming it goes to crawl.rejected with it)."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_CRAWL_CHARS:
        raise ValueError(f"invalid crawl name {str(name)[:70]!r} (1-{MAX_CRAWL_CHARS} characters)")
    if any(c < " " or c == "\x7f" for c in name):
        raise ValueError(f"invalid crawl name {name[:70]!r} (control characters)")
    return name
