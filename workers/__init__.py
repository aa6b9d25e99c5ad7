"""Fetch workers: consume leased jobs, fetch politely, publish pages and feedback.

May import: ``workers``, ``frontier.core``, ``frontier.config``, ``frontier.kafka``,
``frontier.intake.urls``, ``frontier.observability.metrics`` and ``topics``; never the
partition or the service (a worker knows the frontier only through its topics).
"""
