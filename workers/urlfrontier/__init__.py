"""The URLFrontier API (crawler-commons URLFrontier 2.6, gRPC) over the frontier:
``crawl-frontier urlfrontier`` (docs/URLFRONTIER.md).

- ``mapping.py``  the API's terms in the frontier's: crawl IDs, queue keys, fetch status in metadata
- ``queries.py``  questions to every partition on ``crawl.control``, answers on ``crawl.replies``
- ``pool.py``     GetURLs: each crawl's jobs through the worker API, handed out and held
- ``service.py``  the servicer (``Gateway``): each RPC handed to the part it owns, each part given
  ``shared.py`` (``Shared``: configuration, Kafka, the asker, the pools; the crawl and ask steps):
  ``puts.py`` (PutURLs, PutDiscovered), ``handout.py`` (GetURLs, SetActive, GetActive),
  ``listing.py`` (the questions: GetStats, ListCrawls, CountURLs, ListURLs, GetURLStatus,
  ListQueues), ``deletions.py`` (DeleteCrawl, DeleteQueue, PurgeURLs), ``commands.py``
  (BlockQueueUntil, SetDelay, SetCrawlLimit; the gateway's own ListNodes, SetLogLevel)
- ``server.py``   the process
- ``security.py`` who may call (token, TLS and client certificates, client networks) and the limits
- ``proto/``      the API's proto and its generated stubs (``generate.sh``)
"""
