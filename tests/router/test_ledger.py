"""The ledger's rules on plain documents (router/ledger.py): what a table has settled for the job, whether
a letter's record is in it, what a commit writes next, and where a rollback past a replay reads again."""

from __future__ import annotations

import pyarrow as pa

from router.ledger import Ledger, add_offsets, from_document, holds, property_document, subtract_runs

K = "t/0"


def test_offsets_taken_from_replays_merge_into_runs_and_subtract():
    ranges = add_offsets({}, {K: [5, 3, 4, 9]})
    assert ranges == {K: [[3, 5], [9, 9]]}
    ranges = add_offsets(ranges, {K: [6, 8, 7], "t/1": [0]})
    assert ranges == {K: [[3, 9]], "t/1": [[0, 0]]}
    assert holds(ranges, K, 7) and not holds(ranges, K, 2) and not holds(ranges, "t/2", 0)
    assert subtract_runs({K: [[0, 9]]}, {K: [[3, 4], [8, 20]]}) == {K: [[0, 2], [5, 7]]}


def test_settled_rows_are_below_the_next_offset_or_replayed_and_never_in_a_gap():
    ledger = Ledger(offsets={K: 10}, replayed={K: [[12, 13]]}, gaps={K: [[4, 5]]})
    assert [o for o in range(16) if ledger.settled(K, o)] == [0, 1, 2, 3, 6, 7, 8, 9, 12, 13]
    keep = ledger.keep_rows(pa.array(["t"] * 16), pa.array([0] * 16, pa.int32()), pa.array(range(16), pa.int64()))
    assert [o for o, k in enumerate(keep.to_pylist()) if k] == [4, 5, 10, 11, 14, 15]
    assert ledger.position(K) == 4  # cut at the first gap
    assert Ledger(offsets={K: 10}, replayed={K: [[10, 13], [20, 21]]}).position(K) == 14
    assert Ledger(replayed={K: [[0, 1]]}).positions() == {K: 2}


def test_a_letter_is_held_when_a_replay_took_it_or_a_read_after_it_covered_it():
    ledger = from_document({"batch_id": 3, "offsets": {K: 100}, "replayed": {K: [[7, 7]]},
                            "reads": {"1000": {K: 0}, "5000": {K: 50}}})
    assert ledger.holds_letter(K, 7, failed_ms=9000)  # a replay put it there
    assert not ledger.holds_letter(K, 20, failed_ms=2000)  # read at 1000, before the letter: not there
    assert ledger.holds_letter(K, 60, failed_ms=2000)  # read again from 50 at 5000, after the letter
    assert not ledger.holds_letter(K, 60, failed_ms=6000)
    assert ledger.holds_letter(K, 20, failed_ms=2000, concerned=False)  # another route's table read it then
    assert not ledger.holds_letter(K, 100, failed_ms=0)  # not read yet
    started_late = from_document({"batch_id": 0, "offsets": {K: 100}, "reads": {"1000": {K: 90}}})
    assert not started_late.holds_letter(K, 10, failed_ms=0)  # below where the table began reading


def test_a_commit_records_new_partitions_reads_and_closes_gaps_it_read_past():
    ledger = from_document({"batch_id": 1, "offsets": {K: 10}, "reads": {"1000": {K: 0}}})
    doc = ledger.advance({K: [10, 19], "t/1": [5, 9]}, 2, 3000)
    assert doc["offsets"] == {K: 20, "t/1": 10} and doc["reads"] == {"1000": {K: 0}, "3000": {"t/1": 5}}
    assert "reads" not in property_document(doc) and property_document(doc)["offsets"] == doc["offsets"]
    # rolled back past a replay of 5..7 (the latest commit had them, the snapshot does not): gaps
    rolled = from_document({"batch_id": 1, "offsets": {K: 10}, "reads": {"1000": {K: 0}}},
                           latest={"batch_id": 4, "offsets": {K: 30}, "replayed": {K: [[5, 7]]}})
    assert rolled.gaps == {K: [[5, 7]]} and rolled.rewind_from() == {K: 5}
    assert rolled.overlap({K: [5, 12]}) is None  # reading the gap again is new to the table
    again = from_document(rolled.advance({K: [5, 12]}, 5, 4000))
    assert again.gaps == {} and again.offsets == {K: 13}
    assert again.reads == {"1000": {K: 0}, "4000": {K: 5}}  # the read again began at the gap


def test_a_replay_adds_its_offsets_and_keeps_the_job_s_own():
    ledger = from_document({"batch_id": 2, "offsets": {K: 10}})
    doc = ledger.with_replayed({K: [3, 4, 5]}, {K: [4]})
    assert doc["offsets"] == {K: 10} and doc["replayed"] == {K: [[3, 3], [5, 5]]}
    assert doc["superseded"] == {K: [[4, 4]]}
    assert from_document(doc).was_superseded(K, 4) and from_document(doc).settled(K, 4)
    assert from_document({"offsets": {}}, legacy='{"t/0": [[1, 2]]}').replayed == {K: [[1, 2]]}
