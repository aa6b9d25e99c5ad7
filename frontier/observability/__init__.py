"""What people and monitoring see: status snapshots (``status``), Prometheus metrics
(``metrics``) and the live page with its JSON API (``web``, ``static/``).

May import: ``frontier.core``, ``frontier.config``, ``topics.kafka``, ``topics``; ``web`` also
serves the ``FrontierService`` it is given (its type only).
"""
