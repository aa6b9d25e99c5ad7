"""Intake: what users publish on ``crawl.urls``, parsed, canonicalised, keyed and routed.

Owns: address resolution for the optional per-IP scope (``addresses``, pure apart from the
resolver it is given) and the router (``router``: ``crawl.urls`` → ``crawl.urls.bydomain``,
rejections to ``crawl.rejected``). URL parsing and canonical forms are the core's
(``frontier.core.urls``): workers use them too.

May import: ``frontier.core``, ``frontier.config``, ``topics`` (``lint-imports``, pyproject.toml).
"""
