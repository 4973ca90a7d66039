"""Pure offset planning: sorted JSON, fair limits, packing."""

from __future__ import annotations

import json
import pickle
from collections import Counter

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
    plan_limited,
    plan_ranges,
    split_key,
    take_turns,
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


def _drain_in_turns(end: dict, budget: int) -> list[dict[str, tuple[int, int]]]:
    """Batches of a catch-up in turns over a fixed backlog, as the reader plans them."""
    start: dict = {}
    turn = None
    batches = []
    while True:
        ranges, turn = plan_limited(start, end, budget, "turns", turn)
        if not ranges:
            return batches
        batches.append({f"{r.topic}/{r.partition}": (r.from_offset, r.until) for r in ranges})
        start = advance(start, ranges)


def test_turns_read_every_backlog_whole_and_once():
    end = {f"t{t:03d}/{p}": 3333 + t for t in range(200) for p in range(3)}
    batches = _drain_in_turns(end, 500_000)
    assert len(batches) == 5  # 2,059,500 records: four full batches and the rest
    sizes = [sum(hi - lo for lo, hi in batch.values()) for batch in batches]
    assert sizes[:-1] == [500_000] * 4 and sizes[-1] == sum(end.values()) - 2_000_000
    seen = Counter(key for batch in batches for key in batch)
    assert set(seen) == set(end)
    # a partition is read in one batch, whole, except the one a batch ends inside: its next batch goes on
    split = sorted(key for key, n in seen.items() if n > 1)
    assert len(split) == len(batches) - 1 and all(seen[key] == 2 for key in split)
    for key in end:
        spans = sorted(batch[key] for batch in batches if key in batch)
        assert spans[0][0] == 0 and spans[-1][1] == end[key]
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for earlier, later in zip(batches, batches[1:]):
        assert len(set(earlier) & set(later)) == 1  # the next batch goes on with the partition cut
    # a topic's partitions are neighbours: at most the topics on a batch boundary are split
    topics_per_batch = [{key.split("/")[0] for key in batch} for batch in batches]
    split_topics = [t for t in {t for ts in topics_per_batch for t in ts}
                    if sum(t in ts for ts in topics_per_batch) > 1]
    assert len(split_topics) <= len(batches) - 1


def test_even_shares_read_a_piece_of_every_backlog_each_batch():
    end = {f"t{t:03d}/{p}": 3333 for t in range(200) for p in range(3)}
    ranges, turn = plan_limited({}, end, 500_000, "even")
    assert turn is None and len(ranges) == 600
    assert {r.count for r in ranges} == {833, 834}


def test_turns_begin_at_the_deepest_backlog_and_go_on_in_key_order():
    sizes = {"a/0": 10, "b/0": 40, "c/0": 10, "d/0": 10}
    grant, last = take_turns(sizes, 60, None)
    assert grant == {"b/0": 30, "c/0": 10, "d/0": 10, "a/0": 10}  # b/0: its turn of 15, then the rest
    assert last == "a/0"
    grant, last = take_turns({"a/0": 30, "b/0": 30, "c/0": 30}, 60, "a/0")
    assert grant == {"b/0": 30, "c/0": 15, "a/0": 15}


def test_turns_grant_everything_when_it_fits():
    sizes = {"a/0": 10, "b/0": 0, "c/0": 5}
    assert take_turns(sizes, 15, "a/0") == ({"a/0": 10, "c/0": 5}, "a/0")


def test_the_turn_that_does_not_fit_fills_the_batch_and_goes_on_in_the_next():
    sizes = {f"t/{p}": 10 for p in range(6)}
    grant, last = take_turns(sizes, 45, "t/1")
    assert grant == {"t/2": 10, "t/3": 10, "t/4": 10, "t/5": 10, "t/0": 5}
    assert last == "t/5"  # t/0's turn is not done: the next batch begins with it
    grant, last = take_turns({"t/0": 5, "t/1": 10, "t/2": 30, "t/3": 30}, 45, last)
    assert grant == {"t/0": 5, "t/1": 10, "t/2": 11 + 8, "t/3": 11}  # turns of 11, then the round's rest
    assert last == "t/3"


def test_a_deep_backlog_takes_at_most_a_quarter_per_turn_while_others_wait():
    sizes = {"deep/0": 10_000, **{f"small/{p}": 100 for p in range(7)}}
    grant, last = take_turns(sizes, 1000, None)
    # its turn (a quarter of the limit), every small backlog whole, then what the round left
    assert grant == {"deep/0": 250 + 50, **{f"small/{p}": 100 for p in range(7)}}
    assert last == "small/6"
    grant, _ = take_turns({"deep/0": 9_700}, 1000, last)
    assert grant == {"deep/0": 1000}  # alone, it takes the whole limit


@pytest.mark.parametrize("budget", [1, 3, 7, 50, 99])
def test_turns_never_starve_a_partition_under_steady_arrivals(budget):
    """Records keep arriving faster than the limit: every partition still gets a turn each round."""
    rates = {"hot/0": 40, "hot/1": 40, **{f"cold/{p}": 1 for p in range(6)}}
    start = {k: 0 for k in rates}
    end = dict(start)
    turn, last_read = None, {k: 0 for k in rates}
    for batch in range(1, 200):
        end = {k: end[k] + n for k, n in rates.items()}
        ranges, turn = plan_limited(start, end, budget, "turns", turn)
        assert 0 < sum(r.count for r in ranges) <= budget
        for r in ranges:
            last_read[f"{r.topic}/{r.partition}"] = batch
        start = advance(start, ranges)
        if batch > 20:
            assert batch - min(last_read.values()) <= 20, (batch, last_read)


def test_unknown_catch_up_mode_is_rejected():
    with pytest.raises(OffsetsError, match="catch_up"):
        plan_limited({}, {"a/0": 10}, 5, "greedy")


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
