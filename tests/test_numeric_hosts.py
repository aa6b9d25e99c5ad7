"""Numeric spellings of an address never slip past the worker's address check: the intake
rewrites them to dotted decimal (the URL fetched names the plain address), and a spelling that
reached a worker unrewritten (an old record) is still resolved to its address and blocked, or
refused by aiohttp as an invalid URL: either way no request is sent."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from frontier.core.urls import parse_input
from tests.test_worker_jobs import serving
from workers.api.fetch import fetch
from workers.api.safety import AddressPolicy, SafeConnector

LOOPBACK = ["2130706433", "0x7f000001", "0X7F.0.0.1", "0177.0.0.1", "127.1", "127.0.1", "127.0.0.1."]
METADATA = ["2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "0xa9.0xfe.0xa9.0xfe"]


@pytest.mark.parametrize(("spelled", "address"),
                         [(s, "127.0.0.1") for s in LOOPBACK] + [(s, "169.254.169.254") for s in METADATA])  # fmt: skip
def test_numeric_forms_are_fetched_as_the_plain_address_and_blocked(spelled: str, address: str) -> None:
    item = parse_input(f"http://{spelled}/latest/meta-data/".encode())
    assert item.host == address and item.url == f"http://{address}/latest/meta-data/"
    assert not AddressPolicy().allowed(item.host)


async def test_a_worker_blocks_every_spelling_of_a_loopback_server() -> None:
    hits: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        hits.append(request.host)
        return web.Response(text="ok")

    async with serving(ok, "127.0.0.1") as base:
        port = int(base.rsplit(":", 1)[1])
        async with aiohttp.ClientSession(connector=SafeConnector(AddressPolicy())) as strict:
            for spelled in LOOPBACK:
                raw = f"http://{spelled}:{port}/"
                rewritten = parse_input(raw.encode()).url
                assert rewritten == f"http://127.0.0.1:{port}/"
                r = await fetch(strict, rewritten, 5, 1000)
                assert (r.error, r.status) == ("blocked_address", 0), rewritten
                r = await fetch(strict, raw, 5, 1000)  # unrewritten: checked on what it resolves to
                assert r.status == 0 and r.error in ("blocked_address", "client:InvalidUrlClientError"), raw
        assert hits == []
        async with aiohttp.ClientSession(connector=SafeConnector(AddressPolicy(["127.0.0.0/8"]))) as local:
            for spelled in LOOPBACK:  # allowed: the rewritten URL reaches the same server
                r = await fetch(local, parse_input(f"http://{spelled}:{port}/".encode()).url, 5, 1000)
                assert (r.error, r.status, r.body) == ("", 200, b"ok"), spelled
        assert hits == [f"127.0.0.1:{port}"] * len(LOOPBACK)  # the plain address in the Host header
