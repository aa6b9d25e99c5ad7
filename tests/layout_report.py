"""The house in figures: its rooms (the packages of ``frontier/``, ``workers/`` and ``topics``), the
lines and modules in each, and the arrows between rooms (module imports, counted), read from
the code with ``ast``: nothing is imported or run. Run it on any checkout to compare layouts:

    python tests/layout_report.py [ROOT]        # ROOT: a checkout (default: this one)

Also lists the modules over 400 lines and the classes that inherit from more than one class of
ours or from a class of ours that itself inherits one (the partition's mixins: what issue 38
removed)."""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path

TOPS = ("frontier", "workers", "topics")
LIMIT = 400
GENERATED = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def room_of(module: str) -> str:
    """``frontier.partition.leases`` -> ``frontier.partition``; ``topics.kafka`` -> ``topics``;
    ``frontier.archive`` (a module at the top) -> ``frontier.archive``."""
    parts = module.split(".")
    return parts[0] if parts[0] == "topics" else ".".join(parts[:2])


def modules(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            if path.name.endswith(GENERATED) or "fixtures" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]  # fmt: skip
        out.update(n for n in names if n.split(".")[0] in TOPS)
    return out


def main(root: Path) -> None:
    known = modules(root)
    lines: Counter[str] = Counter()
    count: Counter[str] = Counter()
    largest: dict[str, tuple[int, str]] = {}
    arrows: dict[str, Counter[str]] = defaultdict(Counter)
    big: list[tuple[int, str]] = []
    mixed: list[str] = []
    classes: dict[str, list[str]] = {}
    for module, path in known.items():
        text = path.read_text()
        n = text.count("\n")
        room = room_of(module)
        lines[room] += n
        count[room] += 1
        largest[room] = max(largest.get(room, (0, "")), (n, module))
        if n > LIMIT:
            big.append((n, module))
        tree = ast.parse(text, str(path))
        for name in imports(tree, known):
            target = room_of(name)
            if target != room:
                arrows[room][target] += 1
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
    for name, bases in classes.items():
        ours = [b for b in bases if b in classes]
        if len(ours) > 1 or any(classes.get(b) and any(x in classes for x in classes[b]) for b in ours):
            mixed.append(f"{name}({', '.join(bases)})")
    print(f"house: {root.resolve()}  ({sum(count.values())} modules, {sum(lines.values())} lines)")
    print(f"{'room':<28} {'modules':>7} {'lines':>6}  largest module               imports from (modules)")
    for room in sorted(lines):
        n, module = largest[room]
        out = ", ".join(f"{t} {c}" for t, c in sorted(arrows[room].items()))
        print(f"{room:<28} {count[room]:>7} {lines[room]:>6}  {module.split('.')[-1] + f' ({n})':<28} {out}")
    print(f"modules over {LIMIT} lines: " + (", ".join(f"{m} ({n})" for n, m in sorted(big, reverse=True)) or "none"))
    print("classes on a chain of our own classes (mixins): " + (", ".join(sorted(mixed)) or "none"))
    workers_to_service = sorted(
        f"{r} -> {t}" for r in arrows if r.startswith("workers") for t in arrows[r]
        if t in ("frontier.service", "frontier.partition", "frontier.intake", "frontier.cli")
    )  # fmt: skip
    print("workers importing the service's rooms: " + (", ".join(workers_to_service) or "none"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
