"""Importing the package (what a DAG file does) must not import pyspark: DAG parsing
stays fast and works where only the Spark Connect client is installed. The spec layer
sits below the plugins: importing it imports no transport, format or sink."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "modules",
    [
        "airflow_connectors",
        "airflow_connectors.spec",
        "airflow_connectors.spec, airflow_connectors.state, airflow_connectors.transports, "
        "airflow_connectors.formats, airflow_connectors.sinks, airflow_connectors.engine.discovery",
        "airflow_connectors.cli",
        # airflow_connectors.sdk: tests/test_sdk.py checks it loads neither pyspark nor
        # Airflow nor pytest.
    ],
)
def test_import_does_not_load_pyspark(modules: str) -> None:
    code = (
        f"import sys, {modules}\n"
        "loaded = sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {modules} loaded {out.stdout.strip()}"


def test_spec_parsing_does_not_load_pyspark(tmp_path: object) -> None:
    code = (
        "import sys\n"
        "from airflow_connectors.catalog import parse_pipeline\n"
        "parse_pipeline({'pipeline': 'p', 'tables': {'t': {'columns': {'a': 'INT'}, 'connectors': "
        "[{'transport': {'name': 'datagen', 'config': {'plan': [{'limit': 5}]}}}]}}})\n"
        "print('pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


PLUGIN_PACKAGES = (
    "airflow_connectors.transports",
    "airflow_connectors.formats",
    "airflow_connectors.sinks",
)


def test_importing_the_spec_imports_no_plugin() -> None:
    code = (
        "import sys, airflow_connectors.spec\n"
        f"plugins = {PLUGIN_PACKAGES!r}\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(plugins) or m == 'airflow_connectors.catalog')\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", (
        f"importing airflow_connectors.spec loaded {out.stdout.strip()}"
    )


def test_spec_modules_import_no_plugin_even_inside_functions() -> None:
    spec_dir = Path(__file__).resolve().parents[1] / "airflow_connectors" / "spec"
    found = []
    for path in sorted(spec_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                upward = name.startswith(PLUGIN_PACKAGES) or name == "airflow_connectors.catalog"
                if upward:
                    found.append(f"spec/{path.name}:{node.lineno} imports {name}")
    assert not found, "the spec layer imports plugins: " + "; ".join(found)


# --- the import graph: layers point down, no two modules import each other -------------

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_connectors"

#: DESIGN.md's layers, lowest first. A module may import its own layer and those below.
#: Top-level modules sit where they belong: settings, fail points and the plugin registry
#: beside the spec; the catalog, which wires the installed plugins into spec validation,
#: above the plugins; the REST client with the CLI that uses it.
LAYERS: dict[str, int] = {
    "airflow_connectors": 0,
    "airflow_connectors._registry": 0,
    "airflow_connectors.changes": 0,
    "airflow_connectors.failpoints": 0,
    "airflow_connectors.settings": 0,
    "airflow_connectors.spec": 0,
    "airflow_connectors.connections": 1,
    "airflow_connectors.formats": 1,
    "airflow_connectors.sinks": 1,
    "airflow_connectors.transports": 1,
    "airflow_connectors.catalog": 2,
    "airflow_connectors.state": 3,
    "airflow_connectors.engine": 4,
    "airflow_connectors.airflow": 5,
    "airflow_connectors.api_client": 5,
    "airflow_connectors.cli": 5,
    # Test support (servers, clusters, conformance kits): may import anything; nothing
    # of the package imports it.
    "airflow_connectors.testing": 6,
    # The plugin authors' import surface: re-exports the plugin contracts and, on first
    # use, the conformance kits; nothing of the package imports it.
    "airflow_connectors.sdk": 6,
}
TEST_SUPPORT = "airflow_connectors.testing"

#: Pairs that still import each other, with the work that removes them. Empty when the
#: house is in order; a pair listed here that no longer imports each other fails too,
#: so the list cannot go stale.
KNOWN_MUTUAL: frozenset[frozenset[str]] = frozenset()


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, modules: Mapping[str, Path]) -> dict[str, int]:
    """The package's modules that module ``name`` imports, anywhere in it (top level,
    inside functions, under ``TYPE_CHECKING``), each with the line of its first import.
    ``from package import submodule`` imports the submodule; ``from package import
    name`` imports the package."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            targets = subs if len(subs) == len(node.names) else [base, *subs]
        for target in targets:
            while target and target not in modules:  # import a.b.c of a module a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.setdefault(target, node.lineno)
    return found


def layer_of(module: str) -> int:
    """The layer of a module: that of its longest prefix in :data:`LAYERS`."""
    while module not in LAYERS:
        module = module.rpartition(".")[0]
        assert module, f"{module!r} has no layer: add its package to LAYERS"
    return LAYERS[module]


@functools.cache  # the package parsed once for the tests below
def import_graph() -> dict[str, dict[str, int]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


@pytest.mark.slow  # about 0.5 s or more: outside the fast lane
def test_no_two_modules_import_each_other() -> None:
    graph = import_graph()
    pairs = {
        frozenset((a, b)): f"{a}:{graph[a][b]} <-> {b}:{graph[b][a]}"
        for a in graph
        for b in graph[a]
        if a < b and a in graph[b]
    }
    unexpected = sorted(shown for p, shown in pairs.items() if p not in KNOWN_MUTUAL)
    assert not unexpected, (
        "modules import each other (move the shared piece into a module below both): "
        + "; ".join(unexpected)
    )
    gone = sorted(" <-> ".join(sorted(p)) for p in KNOWN_MUTUAL if p not in pairs)
    assert not gone, f"no longer import each other; remove from KNOWN_MUTUAL: {gone}"


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph()
    upward = sorted(
        f"{a}:{line} imports {b}"
        for a, targets in graph.items()
        if not a.startswith(TEST_SUPPORT)
        for b, line in targets.items()
        if layer_of(b) > layer_of(a)
    )
    assert not upward, "imports pointing up a layer (DESIGN.md): " + "; ".join(upward)


def test_the_import_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The graph counts imports inside functions and under TYPE_CHECKING, relative
    imports and submodules imported from their package."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import b\n"
    )
    (pkg / "sub" / "b.py").write_text("def f():\n    import pkg.a\n    from .. import sub\n")
    paths = {
        "pkg": pkg / "__init__.py",
        "pkg.a": pkg / "a.py",
        "pkg.sub": pkg / "sub" / "__init__.py",
        "pkg.sub.b": pkg / "sub" / "b.py",
    }
    graph = {n: imported_modules(n, p, paths) for n, p in paths.items()}
    assert graph == {
        "pkg": {},
        "pkg.a": {"pkg.sub.b": 3},
        "pkg.sub": {"pkg.sub.b": 1},
        "pkg.sub.b": {"pkg.a": 2, "pkg.sub": 3},
    }
