"""Formats runs of one build combined into one result (scripts/perf/live/formats.combine): every round of
every run counts, the ratios are the median of the rounds' ratios, and the targets are judged on them."""

from __future__ import annotations

import json

from scripts.perf.live.formats import combine
from tests.docs.helpers import ROOT


def run(avro: list[int], json_: list[int], load_before=(1.0, 1.0, 1.0), load_after=(2.0, 2.0, 2.0)) -> dict:
    rounds = len(avro)
    runs = {"avro": [{"records_per_s": r} for r in avro], "json": [{"records_per_s": r} for r in json_]}
    ratios = [round(j / a, 3) for j, a in zip(json_, avro)]
    return {"mode": "formats", "topics": 2, "partitions": 1, "records_per_format": 10, "batch_records": 5,
            "formats": ["avro", "json"], "value_bytes_mean": {}, "group_commit": "off", "rounds": rounds,
            "load_before": list(load_before), "load_after": list(load_after), "runs": runs,
            "ratio_per_round": {"avro": [1.0] * rounds, "json": ratios},
            "ratio_to_avro": {"avro": 1.0, "json": sorted(ratios)[rounds // 2]}}


def test_every_round_of_every_run_counts():
    low = run([100, 100, 100], [60, 70, 65], load_before=(3.0, 3.0, 3.0))
    high = run([100, 100, 100], [90, 95, 85])
    got = combine([low, high, run([100, 100, 100], [80, 82, 79], load_after=(0.5, 0.5, 0.5))])
    assert got["rounds"] == 9 and got["runs_combined"] == 3
    assert got["ratio_per_run"]["json"] == [0.65, 0.9, 0.8]
    assert got["ratio_to_avro"]["json"] == 0.8  # the median of the nine rounds' ratios
    assert got["records_per_s"] == {"avro": 100, "json": 80}
    assert got["within_targets"] == {"json": True}
    assert got["load_before"] == [3.0, 3.0, 3.0] and got["load_after"] == [0.5, 0.5, 0.5]
    assert not combine([low])["within_targets"]["json"]


def test_the_committed_result_is_the_combination_of_the_committed_runs():
    bench = ROOT / "benchmarks"
    runs = [json.loads((bench / f"formats_run_{i}.json").read_text()) for i in (1, 2, 3)]
    assert json.loads((bench / "formats.json").read_text()) == json.loads(json.dumps(combine(runs)))
