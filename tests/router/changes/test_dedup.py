"""last_change_per_key against one-by-one models over many random change streams, plus the rules by hand."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from router.changes.dedup import last_change_per_key
from router.changes.extract import OP_CREATE, OP_DELETE, OP_READ, OP_UPDATE, ChangeSpec, extract_changes
from tests.router.changes.model import change_sets, generate, reference, resolved_state

KEYS = {"long": ("id",), "region_id": ("region", "id")}


def check(stream, spec, *, against_truth: bool) -> None:
    sets = change_sets(stream, spec)
    assert not any(s.bad for s in sets), [s.bad for s in sets]
    resolved = last_change_per_key(sets)
    ops, state = reference(stream.events, spec.mode, spec.sequence_by is not None)
    got = resolved_state(resolved, spec.key)
    touched = [tuple(r[c] for c in spec.key) for r in resolved.touched.to_pylist()]
    assert len(touched) == len(set(touched))
    assert set(touched) == set(ops)
    assert dict(zip(touched, resolved.last_op.tolist())) == ops
    assert got == state
    assert resolved.deleted == len(ops) - len(state)
    assert resolved.changes == sum(len(s) for s in sets)
    if against_truth:
        assert set(touched) == stream.touched
        assert got == stream.truth


@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize("mode", ["debezium", "upsert"])
def test_offset_order_in_one_partition(mode, key):
    for seed in range(40):
        rng = random.Random(seed)
        stream = generate(rng, mode=mode, key_cols=KEYS[key], n=rng.randrange(1, 300), keys=rng.choice([3, 20, 200]),
                          before_missing=0.3)
        check(stream, ChangeSpec(mode, KEYS[key]), against_truth=True)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_sequence_by_orders_debezium_changes_across_partitions_and_topics(key):
    """Every change of a key may arrive through another partition or topic: source.lsn restores the order."""
    for seed in range(40):
        rng = random.Random(seed)
        stream = generate(rng, mode="debezium", key_cols=KEYS[key], n=rng.randrange(1, 300), keys=rng.choice([3, 30]),
                          partitions=2, topics=("a", "b"), before_missing=0.2)
        check(stream, ChangeSpec("debezium", KEYS[key], "source.lsn"), against_truth=True)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_sequence_by_with_upsert_tombstones_per_key_partition(key):
    """Tombstones carry no sequence value: they take the one of the change before them in their partition."""
    for seed in range(40):
        rng = random.Random(seed)
        stream = generate(rng, mode="upsert", key_cols=KEYS[key], n=rng.randrange(1, 300), keys=rng.choice([3, 30]),
                          partitions=3, topics=("a", "b"), by_key=True)
        check(stream, ChangeSpec("upsert", KEYS[key], "ts"), against_truth=True)


@pytest.mark.parametrize("mode,column", [("debezium", "ts_ms"), ("upsert", "ts")])
def test_equal_sequence_values_follow_the_tie_rules(mode, column):
    """Coarse sequence values (many ties between partitions): the reference model of the rules decides."""
    for seed in range(60):
        rng = random.Random(seed)
        stream = generate(rng, mode=mode, key_cols=("id",), n=rng.randrange(1, 200), keys=rng.choice([2, 10]),
                          partitions=2, topics=("a", "b"), seq_step=rng.choice([2, 5, 1000]),
                          by_key=(mode == "upsert" and seed % 2 == 0))
        check(stream, ChangeSpec(mode, ("id",), column), against_truth=False)


def test_batches_applied_one_after_another_give_the_source_state():
    """The write contract across batches: delete every touched key's row, insert the final images."""
    for seed in range(20):
        rng = random.Random(seed)
        stream = generate(rng, mode="debezium", key_cols=("id",), n=300, keys=25, before_missing=0.2)
        spec = ChangeSpec("debezium", ("id",))
        table: dict = {}
        cuts = sorted(rng.sample(range(1, 300), 4)) + [len(stream.events)]
        start = 0
        for end in cuts:
            part = type(stream)(stream.events[start:end])
            start = end
            resolved = last_change_per_key(change_sets(part, spec))
            for row in resolved.touched.to_pylist():
                table.pop((row["id"],), None)
            table.update(resolved_state(resolved, ("id",)))
        assert table == stream.truth


# ------------------------------------------------------------------ the rules by hand
ROW = pa.struct([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.large_string())])


def cdc(events, *, topic="t", partition=0, first_offset=0, seq_type=pa.int64()):
    """events: (op, id, name, seq); one ChangeSet."""
    before = [None if op == "c" else {"id": k, "name": None} for op, k, _, _ in events]
    after = [None if op == "d" else {"id": k, "name": name} for op, k, name, _ in events]
    values = pa.table({"before": pa.array(before, ROW), "after": pa.array(after, ROW),
                       "op": pa.array([e[0] for e in events]), "seq": pa.array([e[3] for e in events], seq_type)})
    n = len(events)
    return extract_changes(ChangeSpec("debezium", ("id",), "seq"), values, topic=topic, partition=[partition] * n,
                           offset=range(first_offset, first_offset + n))


def final(sets):
    r = last_change_per_key(sets)
    return {row["id"]: row["name"] for f in r.inserts for row in f.image.to_pylist()}, \
        dict(zip(r.touched.column("id").to_pylist(), r.last_op.tolist()))


def test_many_updates_of_one_key_keep_the_last():
    events = [("c", 1, "v0", 1)] + [("u", 1, f"v{i}", i + 1) for i in range(1, 500)]
    assert final([cdc(events)]) == ({1: "v499"}, {1: OP_UPDATE})


def test_delete_and_reinsert_in_one_transaction_keeps_the_row():
    """Same sequence value (one commit timestamp), one partition: the log order wins over op priority."""
    events = [("c", 1, "a", 7), ("d", 1, None, 9), ("c", 1, "b", 9)]
    assert final([cdc(events)]) == ({1: "b"}, {1: OP_CREATE})


def test_equal_sequence_across_partitions_prefers_the_higher_op():
    left = cdc([("u", 1, "left", 5), ("c", 2, "left", 5), ("r", 3, "left", 5)], partition=0, first_offset=100)
    right = cdc([("d", 1, None, 5), ("r", 2, "right", 5), ("c", 3, "right", 5)], partition=1, first_offset=0)
    images, ops = final([left, right])
    assert ops == {1: OP_DELETE, 2: OP_READ, 3: OP_READ}
    assert images == {2: "right", 3: "left"}


def test_equal_sequence_and_op_across_partitions_prefers_the_higher_offset():
    left = cdc([("u", 1, "left", 5)], partition=0, first_offset=10)
    right = cdc([("u", 1, "right", 5)], partition=1, first_offset=3)
    assert final([left, right])[0] == {1: "left"}
    assert final([right, left])[0] == {1: "left"}


def test_higher_sequence_wins_over_offset_and_op():
    old = cdc([("d", 1, None, 3)], partition=0, first_offset=50)
    new = cdc([("u", 1, "new", 4)], partition=1, first_offset=1)
    assert final([old, new]) == ({1: "new"}, {1: OP_UPDATE})
    same_partition = cdc([("u", 1, "newer", 8), ("u", 1, "older", 2)])  # sequence overrules offsets too
    assert final([same_partition])[0] == {1: "newer"}


@pytest.mark.parametrize("seq_type,values", [
    (pa.large_string(), ["0000001A", "0000002F", "0000002F"]),
    (pa.decimal128(20, 0), [Decimal(10), Decimal(99), Decimal(99)]),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                                    dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)] * 2),
    (pa.float64(), [0.5, 1.5, 1.5]),
])
def test_sequence_values_of_other_types_order_like_their_values(seq_type, values):
    hi, lo = values[1], values[0]
    a = cdc([("u", 1, "hi", hi), ("u", 2, "lo", lo)], seq_type=seq_type, partition=0)
    b = cdc([("u", 1, "lo", lo), ("u", 2, "hi", hi)], seq_type=seq_type, partition=1)
    assert final([a, b])[0] == {1: "hi", 2: "hi"}


def test_upsert_tombstone_sequence_comes_from_its_partition():
    values = pa.table({"id": [1, 2], "name": ["a", "b"], "ts": [5, 5]})
    puts = extract_changes(ChangeSpec("upsert", ("id",), "ts"), values, topic="t", partition=[0, 0], offset=[0, 1])
    keys = pa.table({"id": [1, 2, 3]})
    none = np.array([None] * 3, dtype=object)
    from router.changes.extract import KafkaKeys
    tombs = extract_changes(ChangeSpec("upsert", ("id",), "ts"), None, topic="t", partition=[0, 1, 1],
                            offset=[2, 0, 1], kafka_keys=KafkaKeys(keys, none, none))
    later = extract_changes(ChangeSpec("upsert", ("id",), "ts"), pa.table({"id": [3], "name": ["c"], "ts": [1]}),
                            topic="u", partition=[0], offset=[0])
    images, ops = final([puts, tombs, later])
    # 1: tombstone after its put in partition 0 -> deleted; 2: tombstone alone in partition 1 is older than the
    # put of partition 0; 3: tombstone alone is older than any sequenced change, even ts=1 from another topic
    assert ops == {1: OP_DELETE, 2: OP_UPDATE, 3: OP_UPDATE}
    assert images == {2: "b", 3: "c"}


def test_null_sequence_value_in_a_row_takes_the_previous_one():
    sets = [cdc([("c", 1, "a", 4), ("u", 1, "b", None)], partition=0), cdc([("u", 1, "other", 4)], partition=1)]
    # "b" inherits 4 from "a"; tie with partition 1 at 4, both updates: the higher offset (1 > 0) wins
    assert final(sets)[0] == {1: "b"}


def test_multi_column_keys_with_strings_and_widened_ints():
    """Two writer schemas: id int32 then long; region string. Keys compare by value across them."""
    s1 = pa.table({"region": pa.array(["eu", "us", "eu"], pa.large_string()), "id": pa.array([1, 1, 2], pa.int32()),
                   "v": [1, 2, 3]})
    s2 = pa.table({"region": pa.array(["eu", "us"], pa.large_string()), "id": pa.array([1, 7], pa.int64()),
                   "v": [10, 20], "extra": ["x", "y"]})
    spec = ChangeSpec("upsert", ("region", "id"))
    a = extract_changes(spec, s1, topic="t", partition=[0] * 3, offset=[0, 1, 2], source="v1")
    b = extract_changes(spec, s2, topic="t", partition=[0] * 2, offset=[3, 4], source="v2")
    r = last_change_per_key([a, b])
    assert r.touched.schema.field("id").type == pa.int64()
    assert sorted(map(tuple, (d.values() for d in r.touched.to_pylist()))) == [("eu", 1), ("eu", 2), ("us", 1),
                                                                             ("us", 7)]
    by_source = {f.source: f.image.to_pylist() for f in r.inserts}
    assert by_source == {"v1": [{"region": "us", "id": 1, "v": 2}, {"region": "eu", "id": 2, "v": 3}],
                         "v2": [{"region": "eu", "id": 1, "v": 10, "extra": "x"},
                                {"region": "us", "id": 7, "v": 20, "extra": "y"}]}
    assert [f.rows.tolist() for f in r.inserts] == [[1, 2], [0, 1]]


@pytest.mark.parametrize("key_type,keys", [
    (pa.large_string(), ["a", "b", "a", "é"]), (pa.binary(), [b"\x00", b"\x01", b"\x00", b""]),
    (pa.date32(), [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 1), dt.date(1970, 1, 1)]),
    (pa.decimal128(10, 2), [Decimal("1.10"), Decimal("1.20"), Decimal("1.10"), Decimal("0")]),
    (pa.bool_(), [True, False, True, None]),
])
def test_single_key_columns_of_other_types(key_type, keys):
    values = pa.table({"k": pa.array(keys, key_type), "v": [1, 2, 3, 4]})
    cs = extract_changes(ChangeSpec("upsert", ("k",)), values, topic="t", partition=[0] * 4, offset=range(4))
    r = last_change_per_key(cs)
    good = [k for k in keys if k is not None]
    assert sorted(r.touched.column("k").to_pylist(), key=repr) == sorted(set(good), key=repr)
    images = {row["k"]: row["v"] for f in r.inserts for row in f.image.to_pylist()}
    assert images == {keys[0]: 3, keys[1]: 2, **({keys[3]: 4} if keys[3] is not None else {})}


def test_only_deletes_and_empty_input():
    from router.changes.extract import KafkaKeys
    none = np.array([None, None], dtype=object)
    tombs = extract_changes(ChangeSpec("upsert", ("id",)), None, topic="t", partition=[0, 0], offset=[0, 1],
                            kafka_keys=KafkaKeys(pa.table({"id": [4, 4]}), none, none))
    r = last_change_per_key(tombs)
    assert r.touched.to_pylist() == [{"id": 4}] and r.inserts == () and r.deleted == 1
    empty = extract_changes(ChangeSpec("upsert", ("id",)), pa.table({"id": pa.array([], pa.int64())}), topic="t",
                            partition=[], offset=[])
    r = last_change_per_key([empty])
    assert r.touched.num_rows == 0 and r.changes == 0 and r.inserts == ()
    with pytest.raises(ValueError):
        last_change_per_key([])


def test_key_types_that_do_not_compare_are_refused():
    from router.changes.exceptions import KeyColumnsError
    spec = ChangeSpec("upsert", ("id",))
    a = extract_changes(spec, pa.table({"id": [1]}), topic="t", partition=[0], offset=[0])
    b = extract_changes(spec, pa.table({"id": ["1"]}), topic="t", partition=[0], offset=[1])
    with pytest.raises(KeyColumnsError, match="key columns of one table have types that do not compare"):
        last_change_per_key([a, b])
    c = extract_changes(spec, pa.table({"id": pa.array(["1"], pa.string())}), topic="t", partition=[0], offset=[2])
    d = extract_changes(spec, pa.table({"id": pa.array(["1"], pa.large_string())}), topic="t", partition=[0],
                        offset=[3])
    assert last_change_per_key([c, d]).touched.num_rows == 1
