"""The import contract: a package imports only from layers below its own (the Layout table of the
design and of the README: base, pure, below the engine, engine, live, tracing, integrations, edges).

Every import counts, at module level or inside a function, `TYPE_CHECKING` blocks included: a
function-level import that dodges a cycle is still the dependency it names. The checker is run on a
small tree with a deliberate violation first, so a checker that sees nothing cannot pass. The table
names exactly the packages the tree has (a stale name fails), and no package reaches into another's
private modules (`ctxwin.x._y` is imported only inside `x`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

DESIGN_LAYERS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    # The base: within it, each line may import the lines above it. `paths` (globs and the deny
    # list) sits beside `files`: the tools' workspace and the memory index both refuse what the one
    # deny list names. `lazy` is the helper for packages that load on first use.
    ("base", (("errors", "lazy"), ("files", "paths"), ("messages",), ("tokens",), ("policies",), ("store",))),
    ("pure", (("pipeline",), ("compaction",))),
    ("below the engine", (("providers",), ("memory",))),
    ("engine", (("engine",),)),
    ("live", (("tools",), ("agent",))),
    ("tracing", (("telemetry",),)),  # below the integrations, so the proxy and the adapters can open spans
    ("integrations", (("proxy", "mcp", "adapters"),)),  # optional extras: siblings, never each other
    ("edges", (("transcripts",), ("testing",), ("evaluation",), ("cli",))),
)
"""The design's layers, lowest first, each as its lines in order. Packages on one line are siblings:
neither may import the other."""
LAYERS: tuple[tuple[str, ...], ...] = tuple(line for _, lines in DESIGN_LAYERS for line in lines)
RANK = {package: rank for rank, line in enumerate(LAYERS) for package in line}
ROOT_MODULES = {"__init__", "__main__"}
"""Modules of the root package that stand above every layer (the public façade)."""


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    imported: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.imported}"


def package_of(module: str, top: str) -> str | None:
    """`ctxwin.store.jsonl` -> `store`; None for the root package itself."""
    parts = module.split(".")
    if parts[0] != top or len(parts) == 1:
        return None
    return parts[1]


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from ctxwin import policy` names a subpackage, not the root.
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names if target.count(".") == 0)
    return found


def violations(src: Path, top: str, rank: dict[str, int]) -> list[Violation]:
    out: list[Violation] = []
    for path in sorted((src / top).rglob("*.py")):
        relative = path.relative_to(src).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts)
        own = package_of(module, top)
        if own is None or own in ROOT_MODULES:
            continue
        assert own in rank, f"package {own!r} has no layer in LAYERS: add it"
        for line, imported in imports_of(path, module):
            other = package_of(imported, top)
            if other is None or other == own or other not in rank:
                continue
            if rank[other] >= rank[own]:
                out.append(Violation(module, line, imported))
    return out


def top_level_names(src: Path, top: str) -> set[str]:
    """The packages and modules directly under `src/top` (what `package_of` can return)."""
    return {p.stem if p.is_file() else p.name for p in (src / top).iterdir()
            if (p.is_file() and p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").exists())} - ROOT_MODULES


def private_imports(src: Path, top: str) -> list[Violation]:
    """Imports of another package's private module (`top.x._y`, `top.x.y._z` from outside `top.x`)."""
    out: list[Violation] = []
    for path in sorted((src / top).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        module = ".".join(parts)
        for line, imported in imports_of(path, module):
            names = imported.split(".")
            private = any(name.startswith("_") for name in names[2:])
            if private and package_of(imported, top) not in (None, package_of(module, top)):
                out.append(Violation(module, line, imported))
    return out


def test_the_layers_name_exactly_the_packages_of_the_tree() -> None:
    assert set(RANK) == top_level_names(SRC, "ctxwin")
    assert len(RANK) == sum(len(line) for line in LAYERS)  # no package on two lines


def test_no_package_imports_a_private_module_of_another() -> None:
    found = private_imports(SRC, "ctxwin")
    assert not found, "imports of another package's private module:\n" + "\n".join(map(str, found))


def test_the_private_import_check_finds_one(tmp_path: Path) -> None:
    tree = tmp_path / "pkg"
    for name in ("a", "b"):
        (tree / name).mkdir(parents=True)
        (tree / name / "__init__.py").write_text("")
    (tree / "a" / "_inner.py").write_text("X = 1\n")
    (tree / "a" / "user.py").write_text("from pkg.a._inner import X\n")  # its own package: allowed
    (tree / "b" / "thief.py").write_text("def f():\n    from pkg.a._inner import X\n    return X\n")
    assert [str(v) for v in private_imports(tmp_path, "pkg")] == ["pkg.b.thief:2 imports pkg.a._inner"]


def test_no_package_imports_a_layer_above_its_own() -> None:
    found = violations(SRC, "ctxwin", RANK)
    assert not found, "imports against the layer order:\n" + "\n".join(map(str, found))


def test_the_checker_finds_a_deliberate_violation(tmp_path: Path) -> None:
    tree = tmp_path / "pkg"
    (tree / "low").mkdir(parents=True)
    (tree / "high").mkdir()
    (tree / "__init__.py").write_text("from pkg.high import thing\n")  # the root façade may
    (tree / "low" / "__init__.py").write_text("")
    (tree / "high" / "__init__.py").write_text("from pkg.low import base\n")  # allowed: downwards
    (tree / "low" / "base.py").write_text(
        "def f():\n    from pkg.high import thing  # a function-level import dodging a cycle\n    return thing\n")
    (tree / "high" / "thing.py").write_text("from ..low import base\n")
    found = violations(tmp_path, "pkg", {"low": 0, "high": 1})
    assert [str(v) for v in found] == ["pkg.low.base:2 imports pkg.high"]


def test_siblings_may_not_import_each_other(tmp_path: Path) -> None:
    tree = tmp_path / "pkg"
    for name in ("a", "b"):
        (tree / name).mkdir(parents=True)
        (tree / name / "__init__.py").write_text("")
    (tree / "a" / "x.py").write_text("from pkg.b import y\n")
    assert [str(v) for v in violations(tmp_path, "pkg", {"a": 3, "b": 3})] == ["pkg.a.x:1 imports pkg.b"]


def test_every_public_error_is_defined_in_the_errors_module() -> None:
    """One error hierarchy (httpx's `_exceptions.py`): a class deriving from an exception outside
    `ctxwin/errors.py` must be private (a leading underscore) — control flow inside one module."""
    found = []
    for path in sorted((SRC / "ctxwin").rglob("*.py")):
        if path.name == "errors.py" and path.parent.name == "ctxwin":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in
                                                 ("Exception", "CtxwinError", "InputError")) for b in node.bases):
                found.append(f"{path.relative_to(SRC)}: {node.name}")
    assert not found, "errors defined outside ctxwin/errors.py:\n" + "\n".join(found)
