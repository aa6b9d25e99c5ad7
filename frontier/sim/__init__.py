"""The throttling simulator (``../shared/THROTTLING.md`` §10): model sites and an engine that
drives the real policy against them in virtual time. ``python -m frontier.sim`` prints the table."""
