"""The add-on's DNS resolver (issue 36): Scrapy resolves a job's host again when it connects, after
the worker API checked it, so a DNS answer that changes in between (rebinding) would reach what the
check refused. The add-on puts Scrapy's own caching resolver back on the reactor with the address
check on every answer: run on a real Twisted asyncio reactor, in a process of its own."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from twisted.internet import asyncioreactor
asyncioreactor.install()
from twisted.internet import reactor
from scrapy.resolver import CachingThreadedResolver
from scrapy.settings import Settings
from workers.api.safety import AddressPolicy
from workers.scrapy import resolver

CachingThreadedResolver(reactor, 100, 5.0).install_on_reactor()  # Scrapy's default, as Scrapy installs it
allow = sys.argv[1:]
assert resolver.install(Settings(), AddressPolicy(allow))
assert type(reactor.resolver) is resolver.SafeResolver
got = []

def done(result):
    got.append(result)
    reactor.stop()

reactor.callWhenRunning(lambda: reactor.resolver.getHostByName("localhost").addBoth(done))
reactor.run()
answer = got[0] if isinstance(got[0], str) else type(got[0].value).__name__
print(answer, resolver.blocked_recently("localhost"))
"""


def resolve_localhost(*allow: str) -> str:
    run = subprocess.run([sys.executable, "-c", SCRIPT, *allow], capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip()


def test_an_answer_the_address_check_refuses_is_no_answer() -> None:
    assert resolve_localhost() == "DNSLookupError True"  # loopback: blocked unless allowed


def test_an_allowed_answer_is_scrapys_answer() -> None:
    assert resolve_localhost("127.0.0.0/8") == "127.0.0.1 False"
