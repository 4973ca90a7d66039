"""The inline merge's size-tiered choice (router/catalog/merge_policy.py): `choose` on plain sizes,
the skip rule, and on SQLite and PostgreSQL catalogs: a big file stays while the small ones around
it merge, files of half the merge budget or more are never taken, a file past SIZE_RATIO times the
smaller ones is left out, and a table held over its threshold by big files is not looked at again
(no manifest read) until enough new files arrived.
"""

from __future__ import annotations

import base64
import math
import os
import random

import pyarrow as pa
import pytest

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.catalog.merge_policy import MAX_BYTES, SIZE_RATIO, choose, look_due, merge_threshold, min_merge, threshold
from router.catalog.merge_small import SmallFileMerge
from router.config import MaintenanceConfig
from router.descriptors import TableResult
from tests.router.catalog.test_merge_small import (JOB, RULE, SCHEMA, catalog_config, check_rows,  # noqa: F401
                                                   live_files, result_for)


def sizes(picked) -> list[int]:
    return [f[0] for f in picked]


def files(*sizes_: int) -> list[tuple[int, int, str]]:
    return [(size, seq, f"f{seq}") for seq, size in enumerate(sizes_)]


def test_choose_takes_the_smallest_within_the_ratio():
    assert sizes(choose(files(10, 1, 1, 1))) == [1, 1, 1]  # 10 > 2 x 3: left out
    assert sizes(choose(files(1, 1, 4))) == [1, 1, 4]  # 4 = 2 x 2: in
    assert sizes(choose(files(1, 1, 5))) == [1, 1]
    assert sizes(choose(files(1, 1, 2, 8, 9))) == [1, 1, 2, 8, 9]  # 8 <= 2 x 4, then 9 <= 2 x 12
    assert choose(files(1, 3)) == []  # the second is held to the ratio too
    assert choose(files(7)) == [] and choose([]) == []


def test_choose_starts_later_when_the_smallest_run_is_too_short():
    assert sizes(choose(files(1, 10, 10, 10), min_files=3)) == [10, 10, 10]
    assert sizes(choose(files(1, 10, 10, 10), min_files=2)) == [10, 10, 10]
    assert sizes(choose(files(1, 1, 10, 10), min_files=2)) == [1, 1]  # the smallest run first
    assert choose(files(1, 1, 10, 100), min_files=3) == []


def test_choose_limits_and_ties():
    assert sizes(choose(files(*[1] * 100))) == [1] * 64
    assert sizes(choose(files(4, 4, 4, 4), max_bytes=10)) == [4, 4]
    assert choose(files(6, 6), max_bytes=10) == []
    tied = [(5, 2, "b"), (5, 1, "z"), (5, 1, "a")]
    assert choose(tied, max_files=2) == [(5, 1, "a"), (5, 1, "z")]  # older first, then by path


def test_each_byte_is_rewritten_a_logarithmic_number_of_times():
    """Merging what `choose` takes, batch after batch of random sizes: no appended file's bytes are
    rewritten more than log base 1.5 of (budget / smallest) times (each merge grows their file by 1.5x)."""
    rng = random.Random(11)
    live, rewrites, seq = [], {}, 0  # (size, seq, path); path -> appended files it holds
    for batch in range(600):
        if len(live) >= 12:
            picked = choose(live, min_merge(12))
            if picked:
                gone = {f[2] for f in picked}
                live = [f for f in live if f[2] not in gone]
                held = [a for f in picked for a in rewrites.pop(f[2])]
                for a in held:
                    a[1] += 1
                live.append((sum(f[0] for f in picked), batch, f"m{batch}"))
                rewrites[f"m{batch}"] = held
        size = rng.choice([5_000, 100_000, 1_000_000])
        live.append((size, batch, f"b{batch}"))
        rewrites[f"b{batch}"] = [[size, 0]]
        live = [f for f in live if f[0] < MAX_BYTES // 2]  # compaction's from there on
    counts = [(size, n) for held in rewrites.values() for size, n in held]
    assert max(n for _, n in counts) >= 3  # it did merge, again and again
    assert all(n <= math.log(MAX_BYTES / size, 1.5) + 1 for size, n in counts)


def test_look_due_waits_for_enough_new_files():
    assert look_due(20, None, 4)
    assert not look_due(20, (20, 1), 4) and not look_due(22, (20, 1), 4) and look_due(23, (20, 1), 4)
    assert look_due(21, (20, 7), 4)  # enough candidates, too far apart: the next file may close the gap
    assert not look_due(20, (20, 7), 4)
    assert look_due(19, (20, 1), 4)  # files were removed: look again


def random_rows(table, first: int, rows: int, body_bytes: int) -> list:
    """Data files of `rows` rows whose bodies are `body_bytes` of incompressible text each."""
    ids = list(range(first, first + rows))
    bodies = [base64.b85encode(os.urandom(body_bytes * 4 // 5)).decode() for _ in ids]
    return write_data_files(table, pa.table({"id": pa.array(ids, pa.int64()), "body": pa.array(bodies)}))


def commit_files(config, table_id: str, data_files: list, rows: int, batch: int, **kw):
    """Commit `data_files` as batch `batch` (its rows at offsets 0.. of a partition of their own)."""
    result = TableResult(table_id, data_files=data_files, rows=rows, offsets={f"f/{batch}": [0, rows - 1]})
    outcome = commit_table(config, result, JOB, batch, **kw)
    assert outcome.status == "committed"
    return outcome


def test_a_big_file_stays_while_the_small_ones_merge(catalog_config, unique_name):
    """A 200 KB file (a merged file of earlier batches, say) among batches of ~1 KB: each merge takes
    the small files only; the big file's path stays live throughout (taking the oldest rewrote it)."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    table = load_table(catalog_config, table_id)
    big = random_rows(table, 0, 15, 20_000)
    assert len(big) == 1 and big[0].file_size_in_bytes > 150_000
    commit_files(catalog_config, table_id, big, 15, 0)
    merged = 0
    for batch in range(1, 30):
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 7, 7), JOB,
                               batch, maintenance=RULE)
        assert outcome.status == "committed"
        merged += outcome.merged
        paths = {t.file.file_path for t in live_files(catalog_config, table_id)}
        assert big[0].file_path in paths and len(paths) <= 6
    assert merged >= 10
    check_rows(catalog_config, table_id, list(range(15)) + list(range(7, 210)))


def test_files_of_half_the_budget_are_never_taken(catalog_config, unique_name):
    """Three ~4 MiB files and one of ~16.2 MiB: the ratio (16.2 <= 2 x 12) and the budget (28.4 <= 32)
    would take it too; being MAX_BYTES / 2 or more keeps it out: the merge reads 12 MiB, not 28."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    table = load_table(catalog_config, table_id)
    big = random_rows(table, 0, 40, 512 * 1024)
    assert len(big) == 1 and MAX_BYTES // 2 <= big[0].file_size_in_bytes < MAX_BYTES // 2 + 2**20
    commit_files(catalog_config, table_id, big, 40, 0)
    for batch in range(1, 4):
        table = load_table(catalog_config, table_id, refresh=True)
        mid = random_rows(table, batch * 100, 10, 512 * 1024)
        assert len(mid) == 1 and 3.5 * 2**20 < mid[0].file_size_in_bytes < 4.5 * 2**20
        commit_files(catalog_config, table_id, mid, 10, batch)
    table = load_table(catalog_config, table_id, refresh=True)
    merge = SmallFileMerge(4, RULE.target_file_size_bytes)
    outcome = commit_files(catalog_config, table_id, random_rows(table, 900, 1, 100), 1, 4, merge=merge)
    assert outcome.merged == 3 and big[0].file_path not in {f.file_path for f in merge.sources}
    paths = {t.file.file_path for t in live_files(catalog_config, table_id)}
    assert big[0].file_path in paths and len(paths) == 3  # big, merged, the batch's


def test_a_file_past_the_ratio_is_left_out(catalog_config, unique_name):
    """Files A, B (~6 KB), C (<= 2 x (A + B)) and D (> 2 x (A + B + C)): A, B and C merge, D stays
    (taking the oldest took all four)."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    written = []
    for batch, body in enumerate([6_000, 6_000, 12_000, 100_000]):
        table = load_table(catalog_config, table_id, refresh=True)
        written += random_rows(table, batch * 10, 1, body)
        commit_files(catalog_config, table_id, written[-1:], 1, batch)
    a, b, c, d = (f.file_size_in_bytes for f in written)
    assert c <= SIZE_RATIO * (a + b) and d > SIZE_RATIO * (a + b + c)
    merge = SmallFileMerge(4, RULE.target_file_size_bytes)
    outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", 0, 3), JOB, 4, merge=merge)
    assert outcome.status == "committed" and outcome.merged == 3
    assert {f.file_path for f in merge.sources} == {f.file_path for f in written[:3]}
    paths = {t.file.file_path for t in live_files(catalog_config, table_id)}
    assert written[3].file_path in paths and len(paths) == 3  # D, merged, the batch's
    check_rows(catalog_config, table_id, [0, 10, 20, 30, 0, 1, 2])


def test_a_table_held_over_its_threshold_by_big_files_is_not_looked_at_each_commit(catalog_config, unique_name,
                                                                                    monkeypatch):
    """Twelve files past the small size (target 16 KiB: 12 KiB): the first due commit reads the
    manifests and finds nothing; the next ones do not read them until min_merge new files arrived
    (3 at a threshold of 12), and then the small files merge."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    for batch in range(12):
        table = load_table(catalog_config, table_id, refresh=True)
        commit_files(catalog_config, table_id, random_rows(table, batch * 10, 1, 20_000), 1, batch)
    table = load_table(catalog_config, table_id, refresh=True)
    manifests = {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}
    reads = []
    new_input = type(table.io).new_input

    def counting(io, location):
        if location in manifests:
            reads.append(location)
        return new_input(io, location)

    monkeypatch.setattr(type(table.io), "new_input", counting)
    target = 16 * 1024
    per_commit = []
    for batch in range(12, 16):
        reads.clear()
        merge = SmallFileMerge(12, target)
        assert merge.min_files == 3
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 5, 5), JOB,
                               batch, merge=merge)
        assert outcome.status == "committed"
        per_commit.append((len(reads), outcome.merged))
        manifests |= {m.manifest_path for m in load_table(catalog_config, table_id).current_snapshot().manifests(
            load_table(catalog_config, table_id).io)}
    assert per_commit[0][0] >= 12 and per_commit[0][1] == 0  # looked: twelve manifests, nothing to merge
    assert per_commit[1] == (0, 0) and per_commit[2] == (0, 0)  # 13 and 14 files: not looked at
    assert per_commit[3][0] >= 12 and per_commit[3][1] == 3  # 15: looked, the three small files merged
    check_rows(catalog_config, table_id, list(range(0, 120, 10)) + list(range(60, 80)))


def test_merge_for_lowers_the_threshold_of_a_young_table_and_needs_a_quarter_of_it():
    result = TableResult("n.t", data_files=[object()], rows=1, offsets={"t/0": [0, 0]})
    from router.catalog.merge_small import merge_for
    merge = merge_for(result, MaintenanceConfig(merge_small_files_at=16))
    assert merge.at == 16 and merge.young_at == merge_threshold("n.t", 16) and 8 < merge.young_at <= 16
    assert merge.min_files == 4
    assert merge.small == MAX_BYTES // 2 and merge.budget == MAX_BYTES
    lowered = {merge_threshold(f"n.t{i}", 16) for i in range(200)}
    assert lowered == set(range(9, 17))  # tables created together reach their first merge apart


def test_threshold_is_lowered_only_while_the_table_is_young():
    assert [threshold(16, 10, seq) for seq in (0, 9, 15, 16, 900)] == [10, 10, 10, 16, 16]


def test_a_young_table_merges_at_its_lowered_threshold_a_grown_one_at_the_configured(catalog_config, unique_name):
    """One file a commit. At 5 files (sequence 5 < 8) the lowered threshold of 5 merges; from
    sequence 8 on the table waits for 8 files, then merges again."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    counts, merged_at = [], []
    for batch in range(16):
        merge = SmallFileMerge(8, RULE.target_file_size_bytes, young_at=5)
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 2, 2), JOB, batch,
                               merge=merge)
        assert outcome.status == "committed"
        if outcome.merged:
            merged_at.append((batch, counts[-1]))
        counts.append(len(live_files(catalog_config, table_id)))
    assert merged_at[0] == (5, 5)  # young: merged holding 5 files
    assert all(files >= 8 and batch >= 8 for batch, files in merged_at[1:]) and len(merged_at) >= 2
    assert max(counts[8:]) <= 9 and max(counts[:8]) <= 6
    check_rows(catalog_config, table_id, list(range(32)))


if __name__ == "__main__":
    pytest.main([__file__])
