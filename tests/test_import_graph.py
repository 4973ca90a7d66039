"""The product's import rules, checked on the source (module-level and function-level imports alike).

- no cycles among the modules of router/, registry/ and evolution/;
- router's executor side never imports its driver side (tasks run where there is no driver);
- registry/ and evolution/ never import router/, evolution/ never imports registry/;
- stages: table I/O (router.catalog: writers, delete files, commits, the dead-letter table), routing
  and config are shared by every side, so they import none of executor, driver, maintenance,
  planning or cli; maintenance takes its table I/O from router.catalog, never from the executor;
- the Kafka sources' planner modules load light: Spark imports them in a fresh Python process for
  each planning step of a start (schema, planner), so the write path, the catalog, the registry and
  the libraries behind them (pyiceberg, pyarrow, confluent-kafka ...) come in with the tasks only.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
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

# what Spark's schema and planner processes import (the source classes are pickled by reference)
PLANNER_MODULES = ("router.source.datasource", "router.executor.fused_reader")
# never loaded by them: seconds of imports per process (pyiceberg, polars, pandas, fastavro via the
# registry and the write path); the planner's broker client comes in when it first asks the broker
PLANNER_NEVER_LOADS = ("pyiceberg", "pyarrow", "numpy", "pandas", "polars", "fastavro", "sqlalchemy",
                       "confluent_kafka", "registry", "router.catalog", "router.executor.tasks",
                       "router.descriptors", "router.source.fetch", "router.source.metadata")


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


def loaded_by(modules) -> set[str]:
    """sys.modules of a fresh interpreter (this checkout first on its path) after importing `modules`."""
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    return set(json.loads(out.stdout))


def heavy_in(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if any(within(m, heavy) for heavy in PLANNER_NEVER_LOADS))


def test_the_source_planner_modules_load_light():
    loaded = loaded_by(PLANNER_MODULES)
    assert "pyspark.sql.datasource" in loaded
    assert not heavy_in(loaded), f"the source's planner processes would import {heavy_in(loaded)}"


#: what the command line loads before a command runs (`--help`, usage and configuration errors, and
#: `run` before it starts the JVM): pyiceberg's schema types only (router.table_writes)
CLI_NEVER_LOADS = ("pyarrow", "numpy", "pandas", "polars", "fastavro", "sqlalchemy", "confluent_kafka", "pyspark",
                   "packaging", "pyiceberg.io", "pyiceberg.catalog", "pyiceberg.table", "registry.client",
                   "router.catalog", "router.driver", "router.planning", "router.maintenance", "router.deploy.pack")


def test_the_command_line_and_the_configuration_load_light():
    loaded = loaded_by(["router.cli", "router.config"])
    assert "router.cli.commands" in loaded and "registry.config" in loaded
    heavy = sorted(m for m in loaded if any(within(m, h) for h in CLI_NEVER_LOADS))
    assert not heavy, f"`icerouter --help` would import {heavy}"


def test_the_light_import_rule_can_fail():
    assert {"pyiceberg", "router.catalog"} <= set(heavy_in(loaded_by(["router.executor.tasks"])))


def test_the_fused_source_schema_is_the_descriptor_schema():
    """The fused source builds its schema without pyarrow; it is the descriptors' Arrow schema."""
    from router.descriptors import descriptor_spark_schema
    from router.executor.fused_reader import FusedDataSource, descriptor_struct

    assert descriptor_struct() == descriptor_spark_schema()
    assert FusedDataSource({}).schema() == descriptor_spark_schema()
