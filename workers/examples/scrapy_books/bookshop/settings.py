"""The project's settings: a stock Scrapy project's, plus the frontier add-on."""

BOT_NAME = "bookshop"
SPIDER_MODULES = ["bookshop.spiders"]
NEWSPIDER_MODULE = "bookshop.spiders"
USER_AGENT = "bookshop-bot/1.0 (+https://example.invalid/bookshop)"

# What a polite stock project sets; the add-on takes these over (and says so in the log).
ROBOTSTXT_OBEY = True
AUTOTHROTTLE_ENABLED = True
DOWNLOAD_DELAY = 0.5
CONCURRENT_REQUESTS = 16

ITEM_PIPELINES = {"bookshop.pipelines.JsonLinesPipeline": 300}
BOOKSHOP_ITEMS = "items.jsonl"  # where the pipeline writes (one file per process: -s BOOKSHOP_ITEMS=...)

# On the frontier: the add-on. The crawl is the spider's name unless CRAWL_FRONTIER_CRAWL says;
# the frontier's address comes from CRAWL_FRONTIER_CONFIG (a TOML file) or CRAWL__KAFKA__BOOTSTRAP.
ADDONS = {"workers.scrapy.FrontierAddon": 0}
