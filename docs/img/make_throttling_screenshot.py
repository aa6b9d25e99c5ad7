"""How docs/img/live-page-throttling.png was made: one loopback site with a hidden 4 req/s token
bucket (429 + Retry-After above it), a frontier with its live page, one worker; after a minute,
headless Chromium takes a screenshot of the page charting that site.

    PYTHONPATH=. python docs/img/make_throttling_screenshot.py
"""

import subprocess
import tempfile
import time
from pathlib import Path

from deploy.kafka import LocalKafka, free_port
from frontier.demo.stack import Stack
from tests.integration.helpers import submit
from tests.integration.hidden_sites import HiddenLimitFleet, Limits

OUT = Path(__file__).parent / "live-page-throttling.png"
API_LIKE = {"delay": 0.5, "rampup": {"window": 4.0, "min_delay": 0.05, "target": 1, "max_concurrency": 1},
            "backoff": {"window": 4.0, "min_delay": 0.25}}  # fmt: skip
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--virtual-time-budget=4000", "--window-size=1200,900"]  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kafka = LocalKafka(home=Path(tmp, "kafka"), port=free_port(), controller_port=free_port())
        bootstrap = kafka.up()
        fleet = HiddenLimitFleet([Limits(kind="retry_after_seconds", rate=4.0, burst=2.0)], first_octet=150).start()
        host, web = fleet.sites[0].host, free_port()
        throttle = {"delay": 0.1, "autothrottle": {"start_delay": 0}, "scopes": {host: API_LIKE}}
        stack = Stack(bootstrap, Path(tmp, "stack"), frontier={"web_port": web, "status_interval": 1.0},
                      throttle=throttle)  # fmt: skip
        try:
            stack.create_topics()
            stack.start_frontier()
            stack.start_worker("w1", concurrency=8)
            submit(stack, [f"http://{host}:{fleet.port}/page/{i}" for i in range(400)])
            time.sleep(60)  # a minute of history to chart (a picture, not a test)
            subprocess.run([*CHROMIUM, f"--user-data-dir={tmp}/chromium", f"--screenshot={OUT}",
                            f"http://127.0.0.1:{web}/?scope={host}"], check=True, capture_output=True)  # fmt: skip
        finally:
            stack.stop_all()
            fleet.stop()
            kafka.down()


if __name__ == "__main__":
    main()
