"""The layout holds: each package imports only what its docstring allows, and the pure core
loads no Kafka client, no RocksDB and no HTTP library (docs/ARCHITECTURE.md, "Map")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = ("frontier", "workers", "topics", "deploy")
IO_LIBRARIES = ("confluent_kafka", "aiokafka", "faust", "mode", "rocksdict", "aiohttp")

# Modules that hold logic only: no I/O library may be loaded by importing them.
PURE = (
    "frontier.core.adapt",
    "frontier.core.causes",
    "frontier.core.control",
    "frontier.core.headers",
    "frontier.core.kv",
    "frontier.core.policy",
    "frontier.core.robots",
    "frontier.core.scheduler",
    "frontier.core.state",
    "frontier.partition",
    "frontier.core.urls",
    "frontier.intake.addresses",
    "frontier.observability.watch",
    "frontier.client.history",
    "frontier.client.status",
    "frontier.config",
    "frontier.sim.engine",
    "topics.schemas",
    "topics.catalog",
    "topics.partitioning",
)

# what the worker API may import (a worker knows the frontier only through its topics)
WORKER_API = (
    "workers.api",
    "frontier.core",
    "frontier.config",
    "frontier.observability.process",
    "topics",
)

# package (longest prefix wins) -> the packages and modules of ours it may import
ALLOWED: dict[str, tuple[str, ...]] = {
    "frontier": (),  # the package's own __init__: the map, no imports
    "topics": ("topics",),
    "frontier.config": ("topics.catalog",),
    "frontier.core": (
        "frontier.core",
        "frontier.config",
        "topics.schemas",
        "topics.catalog",
        "topics.partitioning",
    ),
    "frontier.partition": ("frontier.core", "frontier.config", "topics.schemas"),
    "frontier.intake": ("frontier.intake", "frontier.core", "frontier.config", "topics"),
    "frontier.observability": (
        "frontier.observability",
        "frontier.core",
        "frontier.config",
        "frontier.client",
        "topics",
    ),
    "frontier.service": (
        "frontier.service",
        "frontier.core",
        "frontier.config",
        "frontier.partition",
        "frontier.intake",
        "frontier.client",
        "frontier.observability",
        "topics",
    ),
    "frontier.sim": ("frontier.sim", "frontier.core", "frontier.config", "topics.schemas"),
    "frontier.demo": OURS,
    "frontier.cli": OURS,
    "frontier.client": ("frontier.client", "frontier.config", "frontier.core", "topics"),
    "frontier.archive": ("topics.schemas",),  # WARC files from pages (warcio)
    "workers": (),  # the package's own __init__: the map of its rooms, no imports
    "workers.api": WORKER_API,  # the worker API: no other room of workers
    "workers.fetcher": ("workers.api", *WORKER_API),  # the project's worker, on the API
    "workers.examples": ("workers.api", "frontier.config"),  # workers by other code, on the API
    # the Scrapy add-on: a worker on the API, which also asks the frontier when its crawl is done
    "workers.scrapy": ("workers.api", "workers.scrapy", "frontier.client", *WORKER_API),
    # the URLFrontier gateway: a worker of its clients' crawls on the API, asking the partitions
    # (queries on crawl.control) and waiting for the frontier to apply what it put
    "workers.urlfrontier": ("workers.api", "workers.urlfrontier", "frontier.client.feed", *WORKER_API),
    "deploy": ("deploy",),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in OURS:  # from frontier import policy
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] in OURS}


def rule_for(module: str) -> tuple[str, tuple[str, ...]]:
    owners = [p for p in ALLOWED if module == p or module.startswith(p + ".")]
    assert owners, f"{module} belongs to no package of the layout: add it to ALLOWED and the map"
    owner = max(owners, key=len)
    return owner, ALLOWED[owner]


def covered(name: str, allowed: tuple[str, ...]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def test_every_package_imports_only_what_it_may() -> None:
    wrong = []
    sources = [p for top in OURS for p in (ROOT / top).rglob("*.py")]
    assert len(sources) > 40
    for path in sources:
        module = module_name(path)
        owner, allowed = rule_for(module)
        for name in sorted(imports_of(path)):
            if not covered(name, allowed) and not covered(name, (owner,)):
                wrong.append(f"{module} imports {name} (allowed for {owner}: {', '.join(allowed)})")
    assert not wrong, "\n".join(wrong)


def test_the_pure_core_loads_no_io_library() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {PURE!r}: importlib.import_module(name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({IO_LIBRARIES!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_breach_would_be_caught(tmp_path: Path) -> None:
    """The checks above can fail: a core module importing the partition or the RocksDB store."""
    bad = tmp_path / "bad.py"
    bad.write_text("from frontier.service.rocks import RocksKV\nfrom frontier import partition\n")
    _, allowed = rule_for("frontier.core.policy")
    assert [n for n in sorted(imports_of(bad)) if not covered(n, allowed)] == [
        "frontier.partition",
        "frontier.service.rocks",
    ]


def test_every_import_of_ours_resolves() -> None:
    """Also in tests, benchmarks and imports inside functions (which mypy does not see in tests/):
    a module moved or a name renamed leaves no stale import behind."""
    import importlib

    stale = []
    for path in [p for top in (*OURS, "tests") for p in (ROOT / top).rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            if node.module.split(".")[0] not in (*OURS, "tests"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if alias.name == "*" or hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    stale.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module}.{alias.name}")
    assert not stale, "\n".join(stale)


def test_every_module_of_workers_is_in_a_room_with_its_rule() -> None:
    """workers/ holds rooms only (the API, the project's worker, examples, ...), each with a rule
    above: a module outside them, or a room without one, would import under the map's own rule."""
    workers = ROOT / "workers"
    loose = sorted(p.name for p in workers.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules of workers outside its rooms: {loose}"
    rooms = {f"workers.{p.parent.name}" for p in workers.glob("*/__init__.py")}
    assert rooms >= {"workers.api", "workers.fetcher", "workers.examples"}
    assert not rooms - ALLOWED.keys(), f"rooms of workers without a rule in ALLOWED: {sorted(rooms - ALLOWED.keys())}"


def module_graph(package: Path) -> dict[str, set[str]]:
    """The modules of ``package`` (a directory) -> those of them each one imports: at the top, under
    ``TYPE_CHECKING`` and inside functions alike. ``from p import name`` imports the module
    ``p.name`` when there is one, else ``p`` itself (its ``__init__``)."""
    base = package.parent

    def name_of(path: Path) -> str:
        parts = path.relative_to(base).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    paths = {name_of(p): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: from the module's own package, up ``level - 1``
                    parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    source = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [node.module])])
                for alias in node.names:
                    found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in paths else source)
        graph[module] = {name for name in found if name in paths and name != module}
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (its modules in order, the first again at the end), or []."""
    state: dict[str, str] = {}  # "open": on the path being walked; "done": no cycle through it
    path: list[str] = []

    def walk(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for name in sorted(graph[module]):
            if state.get(name) == "open":
                return [*path[path.index(name) :], name]
            if name not in state and (cycle := walk(name)):
                return cycle
        state[module] = "done"
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (cycle := walk(module)):
            return cycle
    return []


def test_no_import_cycle_among_the_modules_of_workers() -> None:
    """Not even one closed only for type checking or by an import inside a function (LeasedJob's
    ``Jobs`` under TYPE_CHECKING was one): each part of the worker API gets what it calls as an
    argument or a small protocol, never by importing the module that imports it."""
    graph = module_graph(ROOT / "workers")
    assert len(graph) > 20 and "workers.api.jobs" in graph["workers.api"]
    assert not (cycle := a_cycle(graph)), "import cycle: " + " -> ".join(cycle)


def test_an_import_cycle_would_be_caught(tmp_path: Path) -> None:
    """The check above can fail: a cycle through an import for type checking only, one inside a
    function and a relative one."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def late():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from .a import A\n")
    (pkg / "d.py").write_text("import pkg.a\nfrom pkg import a\n")
    graph = module_graph(pkg)
    assert graph["pkg.d"] == {"pkg.a"} and graph["pkg"] == set()
    assert a_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("from . import b\n")  # b <-> c only
    assert a_cycle(module_graph(pkg)) == ["pkg.b", "pkg.c", "pkg.b"]
    (pkg / "c.py").write_text("")
    assert a_cycle(module_graph(pkg)) == []
