"""The inline small-file merge's choice of files (router/catalog/merge_policy.py), simulated.

One table, one partition, one file appended per batch (of a fixed size, or
drawn from a seeded mix); once the table holds `at` files the batch's commit
merges what the policy picks. No I/O: sizes only, the merged file the sum of
its sources, no compaction (files of half the budget or more pile up: they are
compaction's). `old` is the former rule (the oldest small files up to
MAX_BYTES: the growing merged file is rewritten at every merge, and once it
nearly fills the budget nothing merges again), `new` the module's own
`choose`, `min_merge` and `look_due`, `two_smallest` the rule with the second
file exempt from the ratio and no later start (a new small file and the last
merged file pair up at every commit). Prints, and with --out writes, per file
size and threshold: the most live files (all, and under half the budget), the
write amplification ((appended + rewritten) / appended bytes), the merges, the
largest merge, the bytes rewritten per batch over the last 100 batches (what a
commit pays once the table is large), the looks at the manifests, the batch of
the last merge, and old/new ratios of each.

Then an estate (`--tables`, 20): tables of one rate, created together, each with its name's lowered
threshold, under two rules: `lowered_always` (the former: the lowered threshold for good) and
`lowered_while_young` (merge_policy.threshold: until the table's sequence number reaches `at`).
Reported: merges in all, and the most merges in one batch (what a batch's commit pays at once).

    python -m scripts.perf.merge_policy --batches 900 --out benchmarks/merge_policy.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from router.catalog.merge_policy import (MAX_BYTES, MAX_FILES, SIZE_RATIO, SMALL_FILE_RATIO, choose, look_due,
                                         merge_threshold, min_merge, threshold)

TARGET = 128 * 1024 * 1024  # maintenance.target_file_size_bytes' default
TAIL = 100  # batches at the end whose rewritten bytes are averaged


def old_policy(live: list, at: int, skip) -> tuple[list, int, None]:
    """The oldest files under 75% of the target, skipping those past the budget, at least two."""
    small = int(TARGET * SMALL_FILE_RATIO)
    budget, picked, total = min(MAX_BYTES, small), [], 0
    for f in sorted((f for f in live if f[0] < small), key=lambda f: f[1:]):
        if len(picked) == MAX_FILES:
            break
        if total + f[0] <= budget:
            picked.append(f)
            total += f[0]
    return (picked if len(picked) >= 2 else []), 1, None


def two_smallest(live: list, at: int, skip) -> tuple[list, int, tuple | None]:
    """`new` but always the two smallest, then each next file within the ratio; no later start."""
    small = min(int(TARGET * SMALL_FILE_RATIO), MAX_BYTES // 2)
    picked, total = [], 0
    for f in sorted(f for f in live if f[0] < small):
        if len(picked) == MAX_FILES or total + f[0] > MAX_BYTES or (len(picked) >= 2 and f[0] > SIZE_RATIO * total):
            break
        picked.append(f)
        total += f[0]
    return (picked if len(picked) >= min_merge(at) else []), 1, None


def new_policy(live: list, at: int, skip) -> tuple[list, int, tuple | None]:
    """merge_small's: candidates under half the budget, `choose`, `min_merge`, the skip memo."""
    if not look_due(len(live), skip, min_merge(at)):
        return [], 0, skip
    small = min(int(TARGET * SMALL_FILE_RATIO), MAX_BYTES // 2)
    candidates = [f for f in live if f[0] < small]
    picked = choose(candidates, min_merge(at), max_bytes=min(MAX_BYTES, int(TARGET * SMALL_FILE_RATIO)))
    if not picked:
        return [], 1, (len(live), len(candidates))
    return picked, 1, None


def simulate(policy, sizes, batches: int, at: int) -> dict:
    live: list[tuple[int, int, str]] = []  # (size, sequence number, path)
    appended = rewritten = merges = looks = largest = max_live = max_small = 0
    tail, skip, last = [], None, None
    for batch in range(batches):
        written = 0
        if len(live) >= at:
            picked, looked, skip = policy(live, at, skip)
            looks += looked
            if picked:
                gone = {f[2] for f in picked}
                live = [f for f in live if f[2] not in gone]
                written = sum(f[0] for f in picked)
                live.append((written, batch, f"m{batch}"))
                rewritten += written
                merges += 1
                last = batch
                largest = max(largest, written)
        size = sizes(batch)
        live.append((size, batch, f"b{batch}"))
        appended += size
        max_live = max(max_live, len(live))
        max_small = max(max_small, sum(1 for f in live if f[0] < MAX_BYTES // 2))
        if batch >= batches - TAIL:
            tail.append(written)
    return {"max_live_files": max_live, "max_live_files_under_half_budget": max_small,
            "write_amplification": round((appended + rewritten) / appended, 2), "merges": merges,
            "largest_merge_bytes": largest, "rewritten_bytes_per_batch_last_100": round(sum(tail) / len(tail)),
            "manifest_looks": looks, "live_files_at_end": len(live), "last_merge_batch": last}


ESTATE_RULES = {"lowered_always": lambda at, young_at, sequence: young_at, "lowered_while_young": threshold}


def simulate_estate(rule: str, tables: int, batches: int, at: int, file_bytes: int = 30_000) -> dict:
    """Tables appending a file a batch (sizes jittered +-50%, seeded), each merging by `rule`'s threshold."""
    rng, per_batch, merges, max_live = random.Random(5), [0] * batches, 0, 0
    for t in range(tables):
        young_at, live, skip = merge_threshold(f"bench.t_{t:03d}", at), [], None
        for batch in range(batches):
            if len(live) >= ESTATE_RULES[rule](at, young_at, batch):  # one commit a batch: sequence = batch
                picked, _, skip = new_policy(live, at, skip)
                if picked:
                    gone = {f[2] for f in picked}
                    live = [f for f in live if f[2] not in gone] + [(sum(f[0] for f in picked), batch, f"m{batch}")]
                    per_batch[batch] += 1
                    merges += 1
            live.append((int(file_bytes * rng.uniform(0.5, 1.5)), batch, f"b{batch}"))
            max_live = max(max_live, len(live))
    return {"merges": merges, "most_merges_in_a_batch": max(per_batch), "max_live_files": max_live}


def ratio(a, b):
    return round(a / b, 2) if b else None


def scenarios(fixed: list[int], batches: int) -> list:
    """(name, batch -> file bytes): each fixed size; a seeded uniform mix of them; sizes jittered
    +-50% around the largest (a busy table's batches); a log-normal spread (many tables' files)."""
    rng = random.Random(7)
    mixed = [rng.choice(fixed) for _ in range(batches)]
    jitter = [int(max(fixed) * rng.uniform(0.5, 1.5)) for _ in range(batches)]
    lognormal = [int(min(8e6, rng.lognormvariate(11.5, 1.5))) for _ in range(batches)]
    return [(str(s), (lambda b, s=s: s)) for s in fixed] + [
        ("mixed", mixed.__getitem__), ("jitter", jitter.__getitem__), ("lognormal", lognormal.__getitem__)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=900)
    ap.add_argument("--at", default="16,9", help="table thresholds, one run each (16 configured is 9..16 "
                    "while a table is young, merge_policy.threshold)")
    ap.add_argument("--sizes", default="5000,100000,1000000", help="file bytes a batch, one run each")
    ap.add_argument("--tables", type=int, default=20, help="tables of the estate run")
    ap.add_argument("--out", help="write the result here as JSON")
    args = ap.parse_args(argv)
    runs = []
    for at in (int(a) for a in args.at.split(",")):
        for name, sizes in scenarios([int(s) for s in args.sizes.split(",")], args.batches):
            got = {label: simulate(policy, sizes, args.batches, at)
                   for label, policy in (("old", old_policy), ("new", new_policy), ("two_smallest", two_smallest))}
            runs.append({"at": at, "min_merge": min_merge(at), "file_bytes": name, **got,
                         "old_over_new": {k: ratio(got["old"][k], got["new"][k]) for k in got["new"]}})
            for label, r in got.items():
                print(f"at {at:>3} {name:>9} {label:>12}: live {r['max_live_files']:>4} "
                      f"(small {r['max_live_files_under_half_budget']:>3}), write amp {r['write_amplification']:>6}, "
                      f"merges {r['merges']:>4}, largest {r['largest_merge_bytes'] / 1e6:6.1f} MB, "
                      f"rewritten/batch at the end {r['rewritten_bytes_per_batch_last_100'] / 1e6:6.2f} MB, "
                      f"looks {r['manifest_looks']:>4}, last merge at {r['last_merge_batch']}")
    at = int(args.at.split(",")[0])
    estate = {rule: simulate_estate(rule, args.tables, args.batches, at) for rule in ESTATE_RULES}
    for rule, r in estate.items():
        print(f"estate of {args.tables} tables at {at}, {rule:>20}: merges {r['merges']:>5}, "
              f"most in one batch {r['most_merges_in_a_batch']}, most live files {r['max_live_files']}")
    result = {"benchmark": "merge_policy", "batches": args.batches, "max_bytes": MAX_BYTES, "max_files": MAX_FILES,
              "size_ratio": SIZE_RATIO, "target_file_size_bytes": TARGET, "runs": runs,
              "estate": {"tables": args.tables, "at": at, **estate}}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
