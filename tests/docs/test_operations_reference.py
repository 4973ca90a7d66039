"""docs/operations.md names every metric the driver serves and every dead-letter reason the code
writes, and nothing else: a metric or a reason added to the code fails here until it is documented
(with what to alert on, or what to do about it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from registry.decode import ERROR_CLASSES
from router.changes.extract import BAD_INPUT_CLASSES
from router.driver.metrics import JobMetrics
from router.exceptions import RouteError
from tests.docs.helpers import DOCS, ROOT

PAGE = DOCS / "operations.md"


def _section(title: str) -> str:
    return PAGE.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def served_metrics() -> set[str]:
    """Every family the endpoint serves, after a batch touched everything (counters by their sample name)."""
    from types import SimpleNamespace

    metrics = JobMetrics("j", lag=lambda: {"orders/0": 1},
                         waiting=lambda: {"ns.cold": {"records": 5, "since": 1.0, "due": False}})
    outcome = SimpleNamespace(status="committed", table="ns.t", attempts=2, where="task", seconds=0.1, rows=1,
                              files=1, delete_files=1, deleted_rows=1, bytes=1, expired_files=1, committed_at=None,
                              oldest_record=1.0)
    failed = SimpleNamespace(**{**vars(outcome), "status": "failed"})
    stats = SimpleNamespace(records=1, dispatch_seconds=0.1, commit_seconds=0.1, task_seconds={"write": 0.1})
    metrics.observe_batch(stats, [outcome, failed], {"decode_error": 1}, quarantined=1)
    metrics.watch_lease(SimpleNamespace(lost=__import__("threading").Event()))  # a job with a lease
    names = set()
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def documented_metrics() -> set[str]:
    table = _section("Metrics").split("What to alert on", 1)[0]
    return set(re.findall(r"^\| `(icerouter_\w+)`", table, re.M))


def test_every_served_metric_is_documented_and_no_other():
    served, documented = served_metrics(), documented_metrics()
    assert served - documented == set(), "document these metrics in docs/operations.md"
    assert documented - served == set(), "docs/operations.md names metrics the driver does not serve"


def code_reasons() -> set[str]:
    """The error classes the code dead-letters with: the registry's decode classes, the change streams'
    bad-input classes, the literal classes the executor passes, and route errors by class name."""
    literals = set()
    for path in (ROOT / "router" / "executor").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "dead_letter"
                    and len(node.args) >= 2):
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    literals.add(arg.value)
                elif isinstance(arg, ast.BinOp) and isinstance(arg.left, ast.Constant):  # "evolution_" + (a if .. else b)
                    right = arg.right
                    options = [right.body, right.orelse] if isinstance(right, ast.IfExp) else [right]
                    literals |= {arg.left.value + o.value for o in options if isinstance(o, ast.Constant)}
    route_errors = {RouteError.__name__} | {c.__name__ for c in RouteError.__subclasses__()}
    return set(ERROR_CLASSES) | set(BAD_INPUT_CLASSES) | literals | route_errors


def documented_reasons() -> set[str]:
    return set(re.findall(r"^\| `(\w+|key_<reason>)`", _section("Dead letters"), re.M))


def test_every_dead_letter_reason_is_documented_and_no_other():
    code, documented = code_reasons(), documented_reasons()
    assert "key_<reason>" in documented  # the Kafka key's decode failures, ERROR_CLASSES prefixed
    assert code - documented == set(), "document these dead-letter reasons in docs/operations.md"
    assert documented - {"key_<reason>"} - code == set(), "docs/operations.md names reasons the code lacks"


def test_the_reason_scan_finds_the_executor_s_classes():
    assert {"unmatched", "quarantined", "fan_in_conflict", "table_write_failed", "evolution_frozen",
            "evolution_violation", "TableNameError"} <= code_reasons()
