"""Scrapy spiders on the frontier: an add-on (``ADDONS = {"workers.scrapy.FrontierAddon": 0}``) that
makes a stock Scrapy project a worker of its crawl, with settings only (docs/WORKERS.md, "Scrapy").

- ``addon``      :class:`FrontierAddon`: what it sets, takes over and refuses, said in the log
- ``requests``   a Scrapy request on the frontier's wire and back (meta ``scrapy``), refused when it cannot go
- ``scheduler``  :class:`FrontierScheduler`: requests out to the crawl, jobs in from the worker API, reports
- ``middleware`` the downloader side (each response and error, retries through the frontier) and the
  spider side (requests tagged with the response they came from)
- ``closing``    :class:`DoneWatch`: the spider stays open while its crawl has work anywhere

May import: ``workers.scrapy``, ``workers.api`` (the worker API), ``frontier.client`` (a crawl's
done), ``frontier.config``, ``topics``, and Scrapy (the optional extra ``.[scrapy]``).
"""

from workers.scrapy.addon import FrontierAddon

__all__ = ["FrontierAddon"]
