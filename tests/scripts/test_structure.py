"""scripts/ as a package: no import from tests/, no cycle among its modules, product code never imports
it, and every command line in scripts/*.py answers --help.

Imports are read from the source (module-level and function-level alike), so a benchmark that
imports a test module inside a function is caught without running it. A bare import of a name
that lives in scripts/ (`import bench_data`) is the old sys.path trick and fails too: modules
import each other as `scripts.<...>`.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_import_graph import find_cycle, within

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
PRODUCT = ("router", "registry", "evolution")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def scripts_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SCRIPTS.rglob("*.py"))}


def imported_names(source: str, name: str, is_package: bool) -> set[str]:
    """Every module name `source` imports, relative imports made absolute; `from a import b` gives a and a.b."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def edges(imported: set[str], known: set[str]) -> set[str]:
    """The known modules among `imported`: `from pkg import mod` counts as mod when mod is a module."""
    return {n for n in imported if n in known and not any(o.startswith(n + ".") for o in imported if o in known)}


def top_level_names() -> set[str]:
    """Names a script could import bare through sys.path: the modules and packages directly in scripts/."""
    names = {p.stem for p in SCRIPTS.glob("*.py")} | {p.name for p in SCRIPTS.iterdir() if (p / "__init__.py").exists()}
    return names - {"__init__"}


def imports_by_module() -> dict[str, set[str]]:
    return {name: imported_names(path.read_text(), name, path.name == "__init__.py")
            for name, path in scripts_modules().items()}


def import_graph() -> dict[str, set[str]]:
    """Module -> the scripts modules it imports; a bare `import bench_data` counts as scripts.bench_data."""
    imports = imports_by_module()
    known, top = set(imports), top_level_names()
    graph = {}
    for name, imported in imports.items():
        imported = imported | {f"scripts.{n}" for n in imported if n.split(".")[0] in top}
        graph[name] = edges(imported, known) - {name}
    return graph


def entry_points() -> list[Path]:
    return sorted(p for p in SCRIPTS.glob("*.py") if p.name != "__init__.py")


def test_the_checks_see_what_they_look_for():
    source = "import os\nfrom tests.router import helpers\n\ndef f():\n    from . import sibling\n    import bench_data\n"
    names = imported_names(source, "scripts.perf.mod", is_package=False)
    assert {"tests.router", "tests.router.helpers", "scripts.perf.sibling", "bench_data"} <= names
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert edges({"scripts.perf", "scripts.perf.workload"}, {"scripts.perf", "scripts.perf.workload"}) \
        == {"scripts.perf.workload"}


def test_scripts_never_import_tests():
    offenders = {name: sorted(n for n in imported if within(n, "tests"))
                 for name, imported in imports_by_module().items()}
    assert not {k: v for k, v in offenders.items() if v}, "scripts/ must not import tests/ (tests may import scripts/)"


def test_scripts_modules_import_each_other_by_package_path():
    top = top_level_names()
    bare = {name: sorted(n for n in imported if n.split(".")[0] in top)
            for name, imported in imports_by_module().items()}
    assert not {k: v for k, v in bare.items() if v}, "import scripts modules as scripts.<...>, not through sys.path"


def test_no_import_cycle_among_scripts_modules():
    graph = import_graph()
    assert any(graph.values()), "no import between scripts modules found: the graph is not read"
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_product_packages_never_import_scripts():
    offenders = {}
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            name = module_name(path)
            found = sorted(n for n in imported_names(path.read_text(), name, path.name == "__init__.py")
                           if within(n, "scripts"))
            if found:
                offenders[name] = found
    assert not offenders


@pytest.mark.parametrize("script", entry_points(), ids=lambda p: p.name)
def test_entry_point_answers_help(script, tmp_path):
    """Run as the README does, from another directory and without PYTHONPATH: the entry point finds the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("usage:"), res.stdout[:500]
