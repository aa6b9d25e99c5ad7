"""A module whose import is seen (tests/integration/test_scrapy_records.py): importing it writes a
line to ``RECORDS_MARKS``. A record naming ``tests.integration.import_marker.Nothing`` as its
request class must not make a Scrapy worker import it."""

from __future__ import annotations

import os

if marks := os.environ.get("RECORDS_MARKS"):
    with open(marks, "a", encoding="utf-8") as out:
        out.write("imported\n")
