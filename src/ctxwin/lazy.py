"""Packages whose names load on first use (PEP 562): importing `ctxwin.memory` or `ctxwin.mcp` does not
import numpy, an SDK or a server stack until one of their names is touched."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `exports` maps each public name to the submodule that
    defines it; the first use imports that submodule and keeps the value on the package."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
