"""The layout holds: the import contracts of pyproject.toml (``lint-imports``), the pure core
loads no Kafka client, no RocksDB and no HTTP library, every import resolves, and the workers'
modules import one another without cycles (docs/ARCHITECTURE.md, "Map")."""

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


def test_the_pure_core_loads_no_io_library() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {PURE!r}: importlib.import_module(name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({IO_LIBRARIES!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_import_contracts_hold() -> None:
    """The layering of pyproject.toml's ``[tool.importlinter]`` contracts (the service over the
    partition over the pure core, the wire as the floor, workers only on the frontier's floor,
    the workers' rooms on the API): ``lint-imports`` keeps them all."""
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout and "kept" in out.stdout


def test_a_breach_would_be_caught(tmp_path: Path) -> None:
    """The contracts can fail: a copy of the tree where the core imports the service, a worker
    the partition, and the wire the frontier breaks three of them."""
    import shutil

    for top in (*OURS, "pyproject.toml"):
        source = ROOT / top
        if source.is_dir():
            shutil.copytree(source, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__", "static", "proto"))
        else:
            shutil.copy(source, tmp_path / top)
    (tmp_path / "frontier" / "core" / "breach.py").write_text("from frontier.service import service\n")
    (tmp_path / "workers" / "api" / "breach.py").write_text("from frontier.partition import frontier\n")
    (tmp_path / "topics" / "breach.py").write_text("import frontier.client\n")
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.returncode != 0
    for breach in ("frontier.core.breach -> frontier.service", "workers.api.breach -> frontier.partition",
                   "topics.breach -> frontier.client"):  # fmt: skip
        assert breach in out.stdout, out.stdout[-4000:]


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
    """workers/ holds rooms only (the API, the project's worker, examples, ...), each named in the
    rooms' contract: a module outside them, or a room the contract does not name, would escape it."""
    import tomllib

    workers = ROOT / "workers"
    loose = sorted(p.name for p in workers.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules of workers outside its rooms: {loose}"
    rooms = {p.parent.name for p in workers.glob("*/__init__.py")}
    assert rooms >= {"api", "fetcher", "examples"}
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c.get("containers") == ["workers"]]
    named = {room.strip() for layer in layered["layers"] for room in layer.split("|")}
    assert not rooms - named, f"rooms of workers the contract does not name: {sorted(rooms - named)}"


def test_every_package_of_the_frontier_is_in_a_layer() -> None:
    """A new package of frontier/ must take its place in the layers, or nothing checks it."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c.get("containers") == ["frontier"]]
    named = {room.strip() for layer in layered["layers"] for room in layer.split("|")}
    frontier = ROOT / "frontier"
    rooms = {p.parent.name for p in frontier.glob("*/__init__.py")} | {
        p.stem for p in frontier.glob("*.py") if p.name != "__init__.py"
    }
    assert not rooms - named, f"packages of frontier outside the layers: {sorted(rooms - named)}"


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
