"""What people and monitoring see of the service: its Prometheus metrics (``metrics``), the live
page with its JSON API (``web``, ``static/``), the scopes it charts (``watch``) and how long its
event loop is held (``loop``). ``process``: what the frontier's and the workers' metrics share
(the only module here workers import).

May import: ``frontier.client`` (the status views the page shows), ``frontier.core``,
``frontier.config``, ``topics``; ``web`` also serves the service's ``Reporting`` part it is
given (its type only). Checked by ``lint-imports`` (pyproject.toml).
"""
