"""Workers refuse private infrastructure unless explicitly allowed: checked after resolution,
for IP literals, IPv4-mapped IPv6, and on every connection (redirect targets come back as new
URLs and are checked again)."""

import aiohttp
import pytest
from aiohttp import web

from tests.test_worker_jobs import serving
from workers.api.fetch import fetch
from workers.api.safety import AddressPolicy, SafeConnector


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("127.45.0.9", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.64.0.1", False),  # carrier-grade NAT
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1%eth0", False),
        ("fd00:ec2::254", False),  # AWS metadata over IPv6
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:93.184.216.34", True),
        ("2002:a9fe:a9fe::1", False),  # 6to4 of 169.254.169.254 (issue 37)
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("2002:5db8:d822::1", True),  # 6to4 of 93.184.216.34
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", False),  # Teredo whose client is 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:a2ff:fffe", False),  # Teredo is special-purpose anyway (2001::/23)
        ("not-an-ip", False),
    ],
)
def test_default_policy(address: str, allowed: bool) -> None:
    assert AddressPolicy().allowed(address) is allowed


def test_allow_list_opens_only_what_it_names() -> None:
    policy = AddressPolicy(allow=["127.0.0.0/8"])
    assert policy.allowed("127.0.0.5") and not policy.allowed("10.0.0.1") and not policy.allowed("169.254.169.254")
    assert AddressPolicy(block_private=False).allowed("10.0.0.1")
    assert policy.allowed("::ffff:127.0.0.5")  # the IPv4 host it is


async def test_fetch_is_blocked_then_allowed_by_configuration(caplog: pytest.LogCaptureFixture) -> None:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async with serving(ok, "127.0.0.88") as base:
        port = int(base.rsplit(":", 1)[1])
        async with aiohttp.ClientSession(connector=SafeConnector(AddressPolicy())) as strict:
            blocked = await fetch(strict, f"http://127.0.0.88:{port}/", 5, 1000)
            by_name = await fetch(strict, f"http://localhost:{port}/", 5, 1000)
            robots = await fetch(strict, f"http://127.0.0.88:{port}/robots.txt", 5, 1000, max_redirects=5)
        assert (blocked.error, blocked.status) == ("blocked_address", 0)
        assert by_name.error == "blocked_address" and robots.error == "blocked_address"
        # said in the log, once per host, with the setting that allows a local test site (a trial
        # spider otherwise closed with no item and no warning)
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "127.0.0.88" in r.getMessage()]
        assert len(said) == 1 and 'allow_networks = ["127.0.0.0/8"]' in said[0], said
        async with aiohttp.ClientSession(connector=SafeConnector(AddressPolicy(["127.0.0.0/8"]))) as local:
            allowed = await fetch(local, f"http://127.0.0.88:{port}/", 5, 1000)
        assert (allowed.error, allowed.status, allowed.body) == ("", 200, b"ok")
