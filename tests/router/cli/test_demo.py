"""`icerouter demo` as a newcomer runs it (smaller): the stack starts, the job runs, the stack stops."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_demo_runs_and_cleans_up(tmp_path):
    workdir = tmp_path / "demo"
    result = subprocess.run([sys.executable, "-m", "router.cli", "demo", "--topics", "8", "--records", "800",
                             "--workdir", str(workdir)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "phase 2" in out and "tables (read back with DuckDB)" in out
    table_lines = [line for line in out.splitlines() if line.startswith(("raw.", "analytics.", "payments.", "ops."))]
    names = {line.split()[0] for line in table_lines}
    assert {"analytics.clicks", "payments.eu", "payments.us", "payments.all_regions", "ops.dead_letters",
            "raw.shop_orders_late"} <= names
    rows = {line.split()[0]: int(line.split()[1].replace(",", "")) for line in table_lines}
    assert rows["ops.dead_letters"] == 2 and rows["raw.shop_orders_late"] == 500
    versions = {line.split()[0]: int(line.split()[3]) for line in table_lines}
    assert versions["raw.shop_orders_00"] == 2  # v2: new column + int -> long applied live
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "the demo left a process behind"
