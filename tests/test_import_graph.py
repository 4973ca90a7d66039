"""The product's import rules, checked on the source (module-level and function-level imports alike).

- no cycles among the modules of router/, registry/ and evolution/;
- router's executor side never imports its driver side (tasks run where there is no driver);
- registry/ and evolution/ never import router/, evolution/ never imports registry/;
- stages: table I/O (router.catalog: writers, delete files, commits, the dead-letter table), routing
  and config are shared by every side, so they import none of executor, driver, maintenance,
  planning or cli; maintenance takes its table I/O from router.catalog, never from the executor.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("router", "registry", "evolution")
FORBIDDEN = [  # (importer prefix, imported prefix, why)
    ("router.executor", "router.driver", "executor code must not depend on the driver"),
    ("registry", "router", "router uses registry, never the other way"),
    ("evolution", "router", "evolution is pure"),
    ("evolution", "registry", "registry uses evolution, never the other way"),
    *[(shared, side, f"{shared} is shared by every side (executors, driver, maintenance, plan/check)")
      for shared in ("router.catalog", "router.routing", "router.config")
      for side in ("router.executor", "router.driver", "router.maintenance", "router.planning", "router.cli")],
    ("router.maintenance", "router.executor", "maintenance takes table I/O from router.catalog"),
    ("router.maintenance", "router.driver", "maintenance runs beside the driver, not inside it"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Product modules `name` imports anywhere in its file (`from pkg import module` is an edge to the module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known}
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = product_modules()
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_layering():
    broken = [f"{importer} imports {imported}: {why}"
              for importer, targets in import_graph().items() for imported in sorted(targets)
              for src, dst, why in FORBIDDEN if within(importer, src) and within(imported, dst)]
    assert not broken, "\n".join(broken)


def test_the_layering_rules_can_fail():
    graph = {"router.maintenance.compaction": {"router.executor.datafiles"}}
    broken = [why for importer, targets in graph.items() for imported in targets
              for src, dst, why in FORBIDDEN if within(importer, src) and within(imported, dst)]
    assert broken == ["maintenance takes table I/O from router.catalog"]


def test_the_checks_see_imports_inside_functions():
    graph = import_graph()
    assert "router.driver.job" in graph["router.cli.commands"]  # imported inside cmd_run
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
