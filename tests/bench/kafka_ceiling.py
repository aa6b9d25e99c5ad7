"""Benchmark 1, the raw Kafka ceiling: a confluent-kafka echo loop on the local broker.

A producer writes N records to topic A; an echo stage consumes A and produces a reply to B for
each; a reader consumes B. Messages per second = N / (time until the last reply is read).
This is the physical limit the frontier is compared with.

    python -m tests.bench.kafka_ceiling [--smoke | --full] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.bench.common import broker, parser, report, size


def echo_loop(bootstrap: str, n: int, partitions: int = 8) -> float:
    a, b = f"bench.a.{uuid.uuid4().hex[:6]}", f"bench.b.{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, partitions, 1) for t in (a, b)]).values():
        fut.result()
    conf = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    source = Producer(conf)
    for i in range(n):
        while True:
            try:
                source.produce(a, b"x" * 100, key=f"d{i % 10000}.com".encode())
                break
            except BufferError:
                source.poll(0.01)
    source.flush(60)

    def consumer(topic: str) -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})  # fmt: skip
        c.subscribe([topic])
        return c

    started = time.perf_counter()

    def echo() -> None:
        c, p, seen = consumer(a), Producer(conf), 0
        while seen < n:
            for msg in c.consume(10000, timeout=0.5):
                if msg.error() is None:
                    while True:
                        try:
                            p.produce(b, msg.value(), key=msg.key())
                            break
                        except BufferError:
                            p.poll(0.01)
                    seen += 1
            p.poll(0)
        p.flush(60)
        c.close()

    thread = threading.Thread(target=echo)
    thread.start()
    reader, got = consumer(b), 0
    while got < n:
        got += sum(1 for m in reader.consume(10000, timeout=0.5) if m.error() is None)
    elapsed = time.perf_counter() - started
    thread.join()
    reader.close()
    return n / elapsed


def main() -> None:
    args = parser(__doc__.split("\n\n")[0]).parse_args()
    n = size(args, smoke=2_000, default=200_000, full=1_000_000)
    with broker(args) as bootstrap:
        rate = echo_loop(bootstrap, n)
    report("kafka_ceiling", messages=n, echo_round_trips_per_s=round(rate))


if __name__ == "__main__":
    main()
