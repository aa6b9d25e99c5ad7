"""Test-session setup.

hypothesis is imported here, at collection, not lazily by its pytest plugin at the end of the
session: CPython 3.11.7 can raise "SystemError: AST constructor recursion depth mismatch"
(gh-106905) when pytest compiles a module after some tests have run.
"""

import hypothesis  # noqa: F401
