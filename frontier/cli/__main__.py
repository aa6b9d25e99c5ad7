"""``python -m frontier.cli``: the same as the ``crawl-frontier`` console script."""

import sys

from frontier.cli import main

sys.exit(main())
