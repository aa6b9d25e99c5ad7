"""When a server of the project (the live page, the URLFrontier gateway) is reachable beyond this
machine: the one rule both use before they start, so they refuse the same binds."""

from __future__ import annotations

import ipaddress

MIN_TOKEN_CHARS = 16  # a token that guards a non-loopback address


def is_loopback(bind: str) -> bool:
    """Does ``bind`` listen on loopback only? ("" and host names other than localhost: no.)"""
    if bind.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip().strip("[]")).is_loopback
    except ValueError:
        return False
