"""Which small files the inline merge takes, and when (router/catalog/merge_small.py performs it).

Which files (`choose`) is size-tiered, so that the bytes rewritten stay a
small multiple of the bytes appended: taking the oldest files re-read and
rewrote the growing merged file at every merge (quadratic in the table's size).
Only files under half of MAX_BYTES are candidates (larger ones are left to
compaction, which writes target-size files: merging them inline rewrites much
for little gain). From the smallest, a file joins while it is at most
SIZE_RATIO times the files already taken, so a file is rewritten only into one
at least 1.5 times its size: a byte O(log) times. A merge needs `min_merge`
files; a look at the manifests that finds none due is remembered per process,
and the next waits until enough files were added for one to be (`look_due`; the
memo is merge_small's `_skips`): big files alone can hold a table over its
threshold. When (`threshold`): at `merge_small_files_at` data files, lowered by
up to half by the table's name while the table is young, so that tables created
together do not merge in step. scripts/perf/merge_policy.py simulates both rules
(benchmarks/merge_policy.json).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

SMALL_FILE_RATIO = 0.75  # as compaction's: files at >= 75% of the target size are left alone
MAX_FILES = 64  # at most this many files in one merge ...
MAX_BYTES = 32 * 1024 * 1024  # ... and this many bytes on disk, so a merge stays a small part of a commit
SIZE_RATIO = 2  # a file joins a merge while it is at most this many times the smaller files taken

Candidate = tuple[int, int, str]  # (file size in bytes, data sequence number, path)


def choose(files: Iterable[Candidate], min_files: int = 2, max_files: int = MAX_FILES,
           max_bytes: int = MAX_BYTES) -> list[Candidate]:
    """The files to merge, by ascending size (ties: older, then by path): from the smallest, each next
    file while it is at most SIZE_RATIO times the files already taken, within `max_files` and
    `max_bytes`; when that run has fewer than `min_files`, the run from the next file, and so on.
    A file is rewritten only into one at least 1.5 times its size: a byte O(log) times in all.
    (The second file is held to the ratio too: else a new small file and the last merged file pair
    up at every commit, and the merged file is rewritten again and again.)"""
    ordered = sorted(files)
    min_files = max(2, min(min_files, max_files))
    for start in range(len(ordered) - min_files + 1):
        picked, total = [], 0
        for f in ordered[start:start + max_files]:
            if total + f[0] > max_bytes or (picked and f[0] > SIZE_RATIO * total):
                break
            picked.append(f)
            total += f[0]
        if len(picked) >= min_files:
            return picked
    return []


def merge_budget(target_file_size_bytes: int) -> int:
    """Bytes one merge reads and writes at most."""
    return min(MAX_BYTES, int(target_file_size_bytes * SMALL_FILE_RATIO))


def merge_candidate_limit(target_file_size_bytes: int) -> int:
    """Files this size or larger are never merged inline: they are left to compaction, which writes
    target-size files (merging them rewrites much for little gain). Compaction plans by the same
    line so that the two never pick the same file (router/maintenance/compaction_plan.py)."""
    return min(int(target_file_size_bytes * SMALL_FILE_RATIO), MAX_BYTES // 2)


def min_merge(at: int) -> int:
    """Files a merge needs: a quarter of the table's threshold, at least 2. Once big files hold a
    table over its threshold every commit may merge: needing a few files merges less often and
    reads and writes fewer bytes (simulated at 16 and 1 MB files: 213 merges for 900 batches, write
    amplification 3.3, against 406 and 3.8 needing 2); more would let small files pile up past it."""
    return max(2, at // 4)


def look_due(total: int, skip: tuple[int, int] | None, min_files: int) -> bool:
    """Whether a table at or over its threshold with `total` data files is worth a look at its
    manifests, given the (total, candidates) of the last look that found nothing due, if any."""
    if skip is None:
        return True
    seen, candidates = skip
    return total < seen or total >= seen + max(1, min_files - candidates)


def merge_threshold(identifier: str, at: int) -> int:
    """`at` lowered by up to half by a stable hash of the table name: the threshold of a young table.
    Tables created together and committed every batch would otherwise all reach `at`, and merge, in
    the same batch, and again at every later merge."""
    return at - zlib.crc32(identifier.encode()) % max(1, at // 2)


def threshold(at: int, young_at: int, sequence: int) -> int:
    """The data files a table holds before a merge is due: `young_at` (merge_threshold's) until its
    `sequence` number reaches `at`, `at` from then on. The first merges, at different counts, set
    each table's phase, and tables keep it: simulated over 20 tables of one rate and 900 batches
    (scripts/perf/merge_policy.py), at most 7 merges in a batch against 8 when the threshold stays
    lowered, and a third fewer merges (1,336 against 1,973: a table held at 9 files merges about
    three times as often as one at 16). A v1 table has no sequence numbers: it stays young."""
    return young_at if sequence < at else at
