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
    "frontier.intake.urls",
    "frontier.intake.addresses",
    "frontier.observability.watch",
    "frontier.observability.history",
    "frontier.observability.status",
    "frontier.config",
    "frontier.sim.engine",
    "topics.schemas",
    "topics.catalog",
    "topics.partitioning",
)

# package (longest prefix wins) -> the packages and modules of ours it may import
ALLOWED: dict[str, tuple[str, ...]] = {
    "frontier": (),  # the package's own __init__: the map, no imports
    "topics": ("topics",),
    "topics.admin": ("topics", "frontier.kafka"),  # its admin clients, like every client, from frontier.kafka
    "frontier.config": ("topics.catalog",),
    "frontier.core": (
        "frontier.core",
        "frontier.config",
        "frontier.intake.urls",
        "topics.schemas",
        "topics.catalog",
        "topics.partitioning",
    ),
    "frontier.partition": ("frontier.core", "frontier.config", "frontier.intake.urls", "topics.schemas"),
    "frontier.intake": ("frontier.intake", "frontier.core", "frontier.config", "frontier.kafka", "topics"),
    "frontier.kafka": ("topics",),
    "frontier.observability": (
        "frontier.observability",
        "frontier.core",
        "frontier.config",
        "frontier.kafka",
        "frontier.intake.urls",
        "topics",
    ),
    "frontier.service": (
        "frontier.service",
        "frontier.core",
        "frontier.config",
        "frontier.partition",
        "frontier.intake",
        "frontier.kafka",
        "frontier.observability",
        "topics",
    ),
    "frontier.sim": ("frontier.sim", "frontier.core", "frontier.config", "topics.schemas"),
    "frontier.demo": OURS,
    "frontier.cli": OURS,
    "frontier.client": ("frontier.config", "frontier.core", "frontier.kafka", "frontier.observability", "topics"),
    "workers": (
        "workers",
        "frontier.core",
        "frontier.config",
        "frontier.kafka",
        "frontier.intake.urls",
        "frontier.observability.metrics",
        "topics",
    ),
    # the Scrapy add-on: a worker like any other, which also asks the frontier when its crawl is done
    "workers.scrapy": (
        "workers",
        "frontier.core",
        "frontier.config",
        "frontier.kafka",
        "frontier.client",
        "topics",
    ),
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
