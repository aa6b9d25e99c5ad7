"""Intake: what users publish on ``crawl.urls``, parsed, canonicalised, keyed and routed.

Owns: URL parsing and canonical forms (``urls``, pure), address resolution for the optional
per-IP scope (``addresses``, pure apart from the resolver it is given) and the router
(``router``: ``crawl.urls`` → ``crawl.urls.bydomain``, rejections to ``crawl.rejected``).

May import: ``frontier.core``, ``frontier.config``, ``topics.kafka``, ``topics``.
"""
