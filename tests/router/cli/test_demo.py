"""`icerouter demo` as a newcomer runs it (smaller): the stack starts, the job runs (Avro,
Protobuf-free, plain JSON and Debezium JSON topics), the stack stops, and the last screen is clean (no Kafka client errors after the broker stops, no Spark WARN lines)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_demo_runs_and_cleans_up(tmp_path, storage):
    workdir = tmp_path / "demo"
    extra = ["--s3"] if storage == "s3" else []
    result = subprocess.run([sys.executable, "-m", "router.cli", "demo", "--topics", "8", "--records", "800",
                             "--workdir", str(workdir), *extra], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "phase 2" in out and "tables (read back with DuckDB)" in out
    if storage == "s3":
        assert "catalog REST http://127.0.0.1:" in out and "tables in s3://" in out
    table_lines = [line for line in out.splitlines()
                   if line.startswith(("raw.", "analytics.", "payments.", "ops.", "crm."))]
    names = {line.split()[0] for line in table_lines}
    assert {"analytics.clicks", "payments.eu", "payments.us", "payments.all_regions", "ops.dead_letters",
            "raw.shop_orders_late"} <= names
    rows = {line.split()[0]: int(line.split()[1].replace(",", "")) for line in table_lines}
    assert rows["ops.dead_letters"] == 3 and rows["raw.shop_orders_late"] == 500
    assert rows["analytics.events"] == 1_000  # plain JSON, no registry: columns inferred
    must_hold_json = int(re.search(r"crm.customers_json must hold ([\d,]+) customers", out).group(1).replace(",", ""))
    assert rows["crm.customers_json"] == must_hold_json  # Debezium's JSON, mirrored like its Avro
    # the change stream: as many live customers as the source table holds, replaced rows in delete files
    must_hold = int(re.search(r"the table must hold ([\d,]+) customers", out).group(1).replace(",", ""))
    customers = next(line.split() for line in table_lines if line.startswith("crm.customers"))
    assert int(customers[1].replace(",", "")) == must_hold
    assert int(customers[6].replace(",", "")) > 0 and customers[7] == "id"  # delete files, key
    versions = {line.split()[0]: int(line.split()[3]) for line in table_lines}
    assert versions["raw.shop_orders_00"] == 2  # v2: new column + int -> long applied live
    # the dead letters are attributed to the topics the poison records were sent to
    by_topic = next(line for line in out.splitlines() if line.startswith("dead letters by source topic:"))
    assert by_topic == "dead letters by source topic: json.events=1, shop.orders_00=1, shop.orders_02=1"
    # a clean last screen: no librdkafka errors, no Spark start-up chatter
    everything = out + result.stderr
    assert not re.search(r"rdkafka|Connection refused|Connect to ipv4|\|FAIL\|", everything), everything[-3000:]
    assert not re.search(r"\bWARN\b|Setting default log level", everything), everything[-3000:]
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "the demo left a process behind"
