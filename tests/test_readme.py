"""The README's Python examples at least compile and use the real API (the client's, the worker API's)."""

import ast
import re
from pathlib import Path

from frontier.client import FrontierClient
from workers.api import Jobs, LeasedJob

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_python_examples_compile_and_call_real_methods() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    apis = {"client": FrontierClient, "job": LeasedJob, "jobs": Jobs}
    seen: set[str] = set()
    for block in blocks:
        tree = ast.parse(block)
        for name, api in apis.items():
            called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call)
                      and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                      and n.func.value.id == name}  # fmt: skip
            used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    and n.value.id == name}  # fmt: skip
            assert all(hasattr(api, attr) for attr in called | used), (name, called | used)
            seen |= {name} if called else set()
    assert seen >= {"client", "job"}, seen  # the client and the worker API are both shown
