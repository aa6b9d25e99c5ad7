"""A stock Scrapy project (a spider with two callbacks, an item pipeline writing JSON lines) that
runs on the frontier through the add-on: its settings add two lines, nothing else changes."""
