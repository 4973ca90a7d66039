"""Java Iceberg, the reference implementation, reads a table whose layout changed under the job.

The table is written through the executor write path and the real commit, its partition spec
evolved twice (day -> bucket -> unpartitioned, files of all three specs live) and its sort order
set, then compacted (a partition's files, whatever their spec, rewritten in the current spec; a
partition left with one file keeps it, as Iceberg's own rewrite does below its minimum input);
Java, DuckDB and pyiceberg must read the same rows after each step.
"""

from __future__ import annotations

import pytest

from router.catalog import load_table
from router.maintenance import compact, plan_compaction
from tests.javaref.client import assert_readers_agree
from tests.javaref.test_reference_reads import catalog_config  # noqa: F401  (the SQLite fixture)
from tests.router.executor.test_layout import STEP, dispatcher_for, orders_batch, setup
from tests.router.executor.test_partition import run_batch

pytestmark = pytest.mark.slow


def test_files_of_three_partition_specs_and_their_compaction(java_reader, catalog_config, registry_url,  # noqa: F811
                                                             unique_name):
    ns, topic, enc, table_id = setup(catalog_config, registry_url, unique_name, "jl")
    layouts = [{"partition_by": ["day(created_at)"]},
               {"partition_by": ["bucket(4, id)"], "sort_by": ["customer desc"]},
               {"partition_by": [], "sort_by": ["id"]}]
    for batch in range(6):  # two batches a layout: every partition of every spec gets two files
        dispatcher = dispatcher_for(catalog_config, registry_url, ns, layouts[batch // 2])
        ids = [k * STEP + batch for k in range(15)]
        _, report = run_batch(dispatcher, [orders_batch(topic, enc, ids, batch * 15)], batch)
        assert not report.failed
    table = load_table(catalog_config, table_id, refresh=True)
    assert sorted({t.file.spec_id for t in table.scan().plan_files()}) == [0, 1, 2]
    rows = assert_readers_agree(java_reader, table)
    assert len(rows) == 90

    before = len(list(table.scan().plan_files()))
    result = compact(table, plan_compaction(table, 1 << 27), 1 << 27)
    assert result.files_removed > 3
    table = load_table(catalog_config, table_id, refresh=True)
    after = {t.file.file_path: t.file.spec_id for t in table.scan().plan_files()}
    assert len(after) < before
    assert 0 not in after.values() and 2 in after.values()  # both days had two files: rewritten in spec 2
    assert assert_readers_agree(java_reader, table) == rows
