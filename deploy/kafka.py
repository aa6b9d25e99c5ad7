"""Run a real single-node Apache Kafka broker (KRaft) on 127.0.0.1 without Docker.

Duties:
- assemble the broker's classpath from Maven Central (``deploy/maven/pom.xml``) and cache it
  outside the repository, keyed by Kafka version;
- write ``server.properties`` and a log4j2 config, format the storage, start ``kafka.Kafka``
  with Java 17, and wait until the broker answers metadata requests;
- stop exactly the broker this module started (pid file + command-line check).

Used by ``crawl-frontier kafka up|down``, the demo and the integration tests. A little over
~300 lines: one broker's life (classpath, configuration, start, readiness, stop) and the
three-broker variant share every step.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

KAFKA_VERSION = os.environ.get("CRAWL_KAFKA_VERSION", "4.1.1")
LOG4J_VERSION = "2.24.3"
POM = Path(__file__).parent / "maven" / "pom.xml"
CACHE_DIR = Path(os.environ.get("CRAWL_CACHE_DIR", Path.home() / ".cache" / "crawl-frontier"))
STATE_DIR = Path(os.environ.get("CRAWL_STATE_DIR", Path.home() / ".local" / "state" / "crawl-frontier"))

JVM_FLAGS = [
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]

LOG4J2_PROPERTIES = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.server.name = org.apache.kafka
logger.server.level = WARN
"""


class KafkaError(RuntimeError):
    """The local broker could not be assembled, started or stopped."""


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    """Return the directory of broker jars for ``version``, resolving it with Maven if absent."""
    target = CACHE_DIR / f"kafka-{version}" / "libs"
    marker = target / ".complete"
    if marker.exists():
        return target
    if shutil.which("mvn") is None:
        raise KafkaError("Maven (mvn) is required to fetch Apache Kafka from Maven Central")
    tmp = target.with_name("libs.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [
        "mvn", "-B", "-q", "-f", str(POM),
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={tmp}",
        f"-Dkafka.version={version}", f"-Dlog4j.version={LOG4J_VERSION}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise KafkaError(f"mvn failed to resolve kafka_2.13:{version}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    marker.touch()
    return target


_GIVEN: set[int] = set()  # ports this process handed out (never twice)


def free_port() -> int:
    """A port free on 127.0.0.1 now, outside the kernel's ephemeral range: a port the kernel picks
    (bind to 0) is one it may give the next outgoing connection too, before the broker or server
    it was picked for binds it (seen in CI: a three-broker cluster's node failed to bind its port,
    taken meanwhile by another test's connection)."""
    low, high = 10_000, _ephemeral_start() - 1
    for _ in range(200):
        port = random.randint(low, high) if high > low else 0
        if port in _GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _GIVEN.add(port)
        return port
    with socket.socket() as s:  # (a machine with no room below its ephemeral range)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _cluster_id() -> str:
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cid if not cid.startswith("-") else "A" + cid[1:]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class LocalKafka:
    """One KRaft node (broker + controller) whose files all live under ``home``.

    Alone it is a single-node cluster; with ``voters`` set it is one node of a cluster.
    """

    home: Path
    port: int = 9092
    controller_port: int = 9093
    heap: str = "1g"
    version: str = KAFKA_VERSION
    node_id: int = 1
    voters: str = ""  # "1@127.0.0.1:19093,2@...": member of a multi-node quorum
    cluster_id: str = ""
    replication: int = 1
    sasl_port: int = 0  # > 0: also listen with SASL_PLAINTEXT (mechanism PLAIN) for ``sasl_users``
    sasl_users: dict[str, str] = field(default_factory=dict)
    # in a network namespace (the cluster harness, tests/cluster): the node runs there (``ip netns
    # exec``), its client listener binds ``host``, its controller listener ``controller_host``, and
    # clients are told ``advertised`` (host:port; e.g. a proxy in front of the node)
    netns: str = ""
    jvm_options: tuple[str, ...] = ()  # added to the node's JVMs (its storage format and itself)
    host: str = "127.0.0.1"
    controller_host: str = ""
    advertised: str = ""
    settings: tuple[str, ...] = ()  # further server.properties lines ("key=value"), written last

    @property
    def bootstrap(self) -> str:
        return self.advertised or f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    def _properties(self, data: Path) -> str:
        r, isr = self.replication, min(2, self.replication)
        chost = self.controller_host or self.host
        quorum = (
            f"controller.quorum.voters={self.voters}"
            if self.voters
            else f"controller.quorum.bootstrap.servers={chost}:{self.controller_port}"
        )
        listeners = f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{chost}:{self.controller_port}"
        advertised = f"PLAINTEXT://{self.bootstrap},CONTROLLER://{chost}:{self.controller_port}"
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        sasl: list[str] = []
        if self.sasl_port:
            listeners += f",SASL_PLAINTEXT://{self.host}:{self.sasl_port}"
            advertised += f",SASL_PLAINTEXT://{self.host}:{self.sasl_port}"
            protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            users = " ".join(f'user_{u}="{pw}"' for u, pw in self.sasl_users.items())
            sasl = [
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            ]
        lines = [
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            quorum,
            f"listeners={listeners}",
            f"advertised.listeners={advertised}",
            "inter.broker.listener.name=PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map={protocols}",
            *sasl,
            f"log.dirs={data}",
            f"default.replication.factor={r}",
            f"min.insync.replicas={isr}",
            f"offsets.topic.replication.factor={r}",
            "offsets.topic.num.partitions=8",
            f"transaction.state.log.replication.factor={r}",
            f"transaction.state.log.min.isr={isr}",
            f"share.coordinator.state.topic.replication.factor={r}",
            f"share.coordinator.state.topic.min.isr={isr}",
            "group.initial.rebalance.delay.ms=0",
            "num.network.threads=2",
            "num.io.threads=2",
            "num.partitions=8",
            "log.cleaner.dedupe.buffer.size=16777216",
            "auto.create.topics.enable=false",
            *self.settings,
        ]
        return "\n".join(lines) + "\n"

    def running_pid(self) -> int | None:
        """The pid of this home's broker if it is alive, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            return None
        return pid if "kafka.Kafka" in cmdline and str(self.home) in cmdline else None

    def up(self, timeout: float = 120.0) -> str:
        """Start the broker unless it already runs; return the bootstrap address when ready."""
        proc = self.start()
        try:
            self.wait_ready(timeout, proc)
        except KafkaError:
            self.down()
            raise
        return self.bootstrap

    def start(self) -> subprocess.Popen[bytes] | None:
        """Launch the node (formatting its storage on first use); None if it already runs."""
        if self.running_pid() is not None:
            return None
        for p in (self.port, self.controller_port) if not self.netns else ():  # (a namespace starts empty)
            if port_open(p, self.host):
                raise KafkaError(f"port {p} is already in use by another process (another broker? `crawl-frontier "
                                 "kafka status`; or choose other ports: kafka.bootstrap = \"127.0.0.1:PORT\" in "
                                 "the configuration given with --config, or CRAWL_KAFKA_PORT)")  # fmt: skip
        libs = libs_dir(self.version)
        self.home.mkdir(parents=True, exist_ok=True)
        data = self.home / "data"
        logs = self.home / "logs"
        logs.mkdir(exist_ok=True)
        props = self.home / "server.properties"
        props.write_text(self._properties(data))
        log4j = self.home / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES)
        java = shutil.which("java") or "java"
        classpath = f"{libs}/*"
        base = [java, *self.jvm_options, f"-Dkafka.logs.dir={logs}", f"-Dlog4j2.configurationFile={log4j}", "-cp",
                classpath]  # fmt: skip
        if not (data / "meta.properties").exists():
            fmt_args = ["format", "-t", self.cluster_id or _cluster_id(), "-c", str(props)]
            if not self.voters:
                fmt_args.append("--standalone")
            fmt = subprocess.run([*base, "kafka.tools.StorageTool", *fmt_args], capture_output=True, text=True,
                                 check=False)  # fmt: skip
            if fmt.returncode != 0:
                raise KafkaError(f"storage format failed: {fmt.stdout}{fmt.stderr}")
        cmd = [java, "-Xms256m", f"-Xmx{self.heap}", *JVM_FLAGS, *base[1:], "kafka.Kafka", str(props)]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        with open(logs / "stdout.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid_file.write_text(str(proc.pid))
        return proc

    def wait_ready(self, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Poll until the broker answers a metadata request (it is then unfenced)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                tail = (self.home / "logs" / "stdout.log").read_text(errors="replace")[-3000:]
                raise KafkaError(f"broker exited with code {proc.returncode}:\n{tail}")
            if self.netns or port_open(self.port, self.host):
                try:
                    # (quiet: refused connections are expected until the node listens)
                    md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": "0"}).list_topics(timeout=2)
                    if md.brokers:
                        return
                except Exception:  # noqa: BLE001 - not ready yet; keep polling until the deadline
                    pass
            time.sleep(0.2)
        raise KafkaError(f"broker at {self.bootstrap} not ready after {timeout:.0f}s")

    def down(self, timeout: float = 30.0) -> bool:
        """Stop this home's broker (SIGTERM, then SIGKILL). Return False if none was running."""
        pid = self.running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.running_pid() is not None:
            time.sleep(0.1)
        if self.running_pid() is not None:
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL the broker (crash simulation)."""
        pid = self.running_pid()
        if pid is not None:
            os.killpg(pid, signal.SIGKILL)


@dataclass
class KafkaCluster:
    """Several KRaft nodes on one host (one quorum; replication 3, min ISR 2 by default)."""

    home: Path
    ports: list[int]
    controller_ports: list[int]
    heap: str = "768m"
    nodes: list[LocalKafka] = field(init=False)

    def __post_init__(self) -> None:
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, c in enumerate(self.controller_ports))
        id_file = self.home / "cluster.id"
        if id_file.exists():
            cid = id_file.read_text().strip()
        else:
            cid = _cluster_id()
            self.home.mkdir(parents=True, exist_ok=True)
            id_file.write_text(cid)
        self.nodes = [
            LocalKafka(
                home=self.home / f"node-{i + 1}",
                port=p,
                controller_port=c,
                heap=self.heap,
                node_id=i + 1,
                voters=voters,
                cluster_id=cid,
                replication=min(3, len(self.ports)),
            )
            for i, (p, c) in enumerate(zip(self.ports, self.controller_ports, strict=True))
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def running(self) -> bool:
        return any(n.running_pid() is not None for n in self.nodes)

    def up(self, timeout: float = 180.0) -> str:
        """Start every node at once (a quorum needs a majority), then wait for each to be ready."""
        procs = [n.start() for n in self.nodes]
        try:
            for node, proc in zip(self.nodes, procs, strict=True):
                node.wait_ready(timeout, proc)
        except KafkaError:
            self.down()
            raise
        return self.bootstrap

    def down(self) -> bool:
        return any([n.down() for n in self.nodes])


def default_broker(port: int = 0) -> LocalKafka:
    """The broker that ``crawl-frontier kafka up`` manages: on ``port`` (the configuration's
    ``kafka.bootstrap`` port) and the next one, else ``CRAWL_KAFKA_PORT`` (9092) and
    ``CRAWL_KAFKA_CONTROLLER_PORT`` (9093); its data under ``CRAWL_STATE_DIR`` (a directory of its
    own for a port other than 9092)."""
    home = STATE_DIR / ("kafka" if port in (0, 9092) else f"kafka-{port}")
    if not port:
        port = int(os.environ.get("CRAWL_KAFKA_PORT", "9092"))
        controller = int(os.environ.get("CRAWL_KAFKA_CONTROLLER_PORT", "0")) or port + 1
    else:
        controller = port + 1
    return LocalKafka(home=home, port=port, controller_port=controller)


def default_cluster(nodes: int = 3, port: int = 0) -> KafkaCluster:
    """The cluster that ``crawl-frontier kafka up --nodes N`` manages: ports 9092, 9192, 9292, ...
    (from ``port``, else ``CRAWL_KAFKA_PORT``)."""
    base = port or int(os.environ.get("CRAWL_KAFKA_PORT", "9092"))
    return KafkaCluster(
        home=STATE_DIR / (f"kafka-{nodes}nodes" if port in (0, 9092) else f"kafka-{nodes}nodes-{port}"),
        ports=[base + 100 * i for i in range(nodes)],
        controller_ports=[base + 100 * i + 1 for i in range(nodes)],
    )
