"""What the examples share: their command line (``--config``, ``--concurrency``) and logging."""

from __future__ import annotations

import argparse
import logging

from frontier.config import Config, load


def options(description: str, **extra: tuple[type, object, str]) -> tuple[Config, argparse.Namespace]:
    """Parse ``--config FILE --concurrency N`` and ``extra`` (name: (type, default, help))."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default=None, help="the crawl's TOML configuration (default: built-in defaults)")
    p.add_argument("--concurrency", type=int, default=8, help="jobs in user code's hands at a time")
    for name, (kind, default, text) in extra.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, help=text)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return load(args.config), args
