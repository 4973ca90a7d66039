"""Pure offset planning: sorted JSON, fair limits, packing."""

from __future__ import annotations

import json
import pickle

import pytest

from router.source.exceptions import OffsetsError
from router.source.offsets import (
    Range,
    advance,
    fair_shares,
    from_json,
    merge_end,
    normalize,
    pack_ranges,
    plan_ranges,
    split_key,
    to_json,
)


def test_json_keys_are_sorted_whatever_the_input_order():
    text = to_json({"b/1": 5, "a/10": 1, "a/2": 3})
    assert list(json.loads(text)) == ["a/10", "a/2", "b/1"]
    assert to_json(from_json(text)) == text
    assert list(normalize({"z/0": 1, "a/0": 2})) == ["a/0", "z/0"]


@pytest.mark.parametrize("bad", ['{"a": 1}', '{"a/x": 1}', '{"a/0": -1}', '{"a/0": true}', "[1]", "nope"])
def test_invalid_offsets_are_rejected(bad):
    with pytest.raises(OffsetsError):
        from_json(bad)


def test_topic_names_with_slashes_split_on_the_last_one():
    assert split_key("a/b/3") == ("a/b", 3)


def test_merge_end_keeps_start_keys_and_never_goes_backwards():
    end = merge_end({"a/0": 10, "gone/0": 4}, {"a/0": 7, "a/1": 3, "new/0": 9})
    assert end == {"a/0": 10, "a/1": 3, "gone/0": 4, "new/0": 9}


def test_plan_ranges_unlimited_covers_every_new_offset_and_new_partitions_from_zero():
    ranges = plan_ranges({"a/0": 5, "a/1": 7}, {"a/0": 9, "a/1": 7, "b/0": 2})
    assert ranges == [Range("a", 0, 5, 9), Range("b", 0, 0, 2)]


def test_plan_ranges_limit_is_shared_fairly():
    start = {"big/0": 0, "big/1": 0, "small/0": 0}
    end = {"big/0": 1000, "big/1": 500, "small/0": 3}
    ranges = plan_ranges(start, end, 103)
    counts = {(r.topic, r.partition): r.count for r in ranges}
    assert sum(counts.values()) == 103
    assert counts[("small", 0)] == 3  # small partitions drain completely
    assert counts[("big", 0)] == counts[("big", 1)] == 50
    assert advance(start, ranges) == {"big/0": 50, "big/1": 50, "small/0": 3}


def test_plan_ranges_limit_smaller_than_partition_count_still_progresses():
    end = {f"t/{p}": 10 for p in range(5)}
    ranges = plan_ranges({}, end, 3)
    assert sum(r.count for r in ranges) == 3
    # repeated batches eventually drain everything, never exceeding the limit
    start: dict = {}
    batches = 0
    while True:
        ranges = plan_ranges(start, end, 3)
        if not ranges:
            break
        assert sum(r.count for r in ranges) <= 3
        start = advance(start, ranges)
        batches += 1
    assert start == end and batches == 17


def test_fair_shares_never_exceeds_sizes_or_budget():
    sizes = {"a": 1, "b": 2, "c": 100, "d": 7}
    for budget in range(0, 120):
        grant = fair_shares(sizes, budget)
        assert sum(grant.values()) == min(budget, sum(sizes.values()))
        assert all(0 <= grant[k] <= sizes[k] for k in sizes)


def test_pack_ranges_packs_many_small_partitions_into_few_balanced_tasks():
    ranges = [Range(f"topic-{t}", p, 0, 10 + (t * 7 + p) % 13) for t in range(200) for p in range(3)]
    tasks = pack_ranges(ranges, 4)
    assert len(tasks) == 4
    flat = sorted(r for task in tasks for r in task)
    assert flat == sorted(ranges)
    loads = [sum(r.count for r in task) for task in tasks]
    assert max(loads) - min(loads) <= max(r.count for r in ranges)


def test_pack_ranges_never_more_tasks_than_ranges_and_skips_empty():
    ranges = [Range("a", 0, 0, 5), Range("b", 0, 3, 3)]
    assert pack_ranges(ranges, 8) == [[Range("a", 0, 0, 5)]]
    assert pack_ranges([], 8) == []
    with pytest.raises(OffsetsError):
        pack_ranges(ranges, 0)


def test_pack_ranges_splits_a_hot_partition_over_distinct_tasks():
    ranges = [Range("hot", 0, 100, 1_000_100), Range("cold", 0, 0, 10)]
    tasks = pack_ranges(ranges, 4, min_split=1000)
    assert len(tasks) == 4
    hot = sorted(r for task in tasks for r in task if r.topic == "hot")
    assert hot[0].from_offset == 100 and hot[-1].until == 1_000_100
    assert all(a.until == b.from_offset for a, b in zip(hot, hot[1:]))
    for task in tasks:  # one assignment per topic-partition within a task
        tps = [(r.topic, r.partition) for r in task]
        assert len(tps) == len(set(tps))


def test_pack_ranges_does_not_split_below_min_split():
    tasks = pack_ranges([Range("a", 0, 0, 4), Range("a", 1, 0, 3), Range("a", 2, 0, 3)], 4)
    # no range is split, and a small topic stays in one task (one data file per table and batch)
    assert [len(t) for t in tasks] == [3]
    assert all(r.count in (3, 4) for t in tasks for r in t)


def test_range_is_picklable():
    r = Range("a", 1, 2, 3)
    assert pickle.loads(pickle.dumps(r)) == r
