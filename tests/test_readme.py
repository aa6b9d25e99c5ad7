"""The README's Python examples at least compile and use the client's real API."""

import ast
import re
from pathlib import Path

from frontier.client import FrontierClient

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_python_examples_compile_and_call_real_methods() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for block in blocks:
        tree = ast.parse(block)
        called = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and isinstance(n.func.value, ast.Name) and n.func.value.id == "client"}  # fmt: skip
        assert called and all(hasattr(FrontierClient, name) for name in called), called
