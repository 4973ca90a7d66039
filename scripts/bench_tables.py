"""The benchmark tables of the docs and the README, generated from benchmarks/*.json.

Every figure is read from the JSON file its row cites, so the text cannot drift from the
measurement. One row per target, from the run that is current for it; superseded runs stay in
their JSON files (and the git log), not in the tables. When a new run supersedes one, point
its row at the new file and run `python scripts/gen_docs.py` (tests/docs checks the pages are
up to date with the JSON).

    python scripts/bench_tables.py            # print the tables (Markdown)
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load(name: str) -> dict[str, Any]:
    return json.loads((BENCHMARKS / name).read_text())


def n(value: float) -> str:
    """A count with thousands separators."""
    return f"{round(value):,}"


def x(value: float) -> str:
    return f"x{value:.2f}".rstrip("0").rstrip(".")


def pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def group_note(d: dict) -> str:
    """Said where a run left the job's consumer group commits out: the local broker rewrites its whole
    store on each one (router/devstack/broker.py), a cost a Kafka cluster does not have."""
    return "; consumer group commits off (the local broker's store rewrite)" if d.get("group_commit") == "off" else ""


#: runs beside a cited one, by the prefix of their files (upsert_json_run_2.json ...)
SIBLINGS = {"upsert_json_run": ("upsert_json_run_2.json", "upsert_json_run_3.json"),
            "upsert_json_before": ("upsert_json_before.json", "upsert_json_before_2.json"),
            "formats_run": ("formats_run_1.json", "formats_run_2.json", "formats_run_3.json")}


def sibling_rates(prefix: str) -> str:
    return " and ".join(n(load(name)["change_events_per_s"]) for name in SIBLINGS[prefix])


def per_run(d: dict, fmt: str) -> str:
    """A format's ratio in each run a combined formats result holds (scripts/perf/live/formats.combine)."""
    return ", ".join(x(r) for r in d.get("ratio_per_run", {}).get(fmt, []))


def drains(d: dict) -> str:
    return ", ".join(n(r) for r in d["ceiling"]["runs_records_per_s"])


def formats_runs(d: dict) -> str:
    rounds, runs = d.get("rounds", 2), d.get("runs_combined", 1)
    within = f" in {runs} runs" if runs > 1 else ""
    return (f"medians of {rounds} interleaved drains{within} of {d['records_per_format'] / 1e6:g}M "
            f"records{group_note(d)}")


def round_range(d: dict) -> str:
    """The lowest and highest ratio of single rounds, per format against Avro."""
    spans = {f: r for f, r in d["ratio_per_round"].items() if f != "avro"}
    return ", ".join(f"{f} {x(min(r))}-{x(max(r))}" for f, r in spans.items())


def breakdown(d: dict, before: dict | None = None) -> str:
    """Microseconds a record: fetch (the broker's CPU), copy into Arrow, decode; the raw consume's wall."""
    r = d["per_record"]
    decode = f"decode {r['decode']['wall_us']:.2f}"
    if before is not None:
        decode += f" (was {before['per_record']['decode']['wall_us']:.2f})"
    return (f"fetch **{r['fetch']['wall_us']:.2f} us** (broker CPU {r['fetch']['broker_cpu_us']:.2f}, a raw consume's "
            f"{r['raw_consume']['broker_cpu_us']:.2f}), copy into Arrow {r['copy_into_arrow']['wall_us']:.2f}, "
            f"{decode}; a raw consume {r['raw_consume']['wall_us']:.2f} us")


def live_files_max(d: dict) -> int:
    return max(s["live_per_table_max"] for s in d["files_over_time"])


def commit_work_ratio(cadence: dict, every_batch: dict) -> float:
    """Commit CPU per batch with every table committing every batch, over the same with commit cadences."""
    return (every_batch["estate"]["commit_work"]["commit_cpu_seconds_per_batch"]
            / cadence["estate"]["commit_work"]["commit_cpu_seconds_per_batch"])


def estate_commit_work(cadence: dict, every_batch: dict) -> str:
    ours, all_ = cadence["estate"]["commit_work"], every_batch["estate"]["commit_work"]
    return (f"**{x(commit_work_ratio(cadence, every_batch))} less CPU** ({ours['commit_cpu_seconds_per_batch']:.2f} "
            f"against {all_['commit_cpu_seconds_per_batch']:.2f} s), {ours['tables_per_batch']:.0f} table commits "
            f"against {all_['tables_per_batch']:.0f}; every batch: hot p95 "
            f"{every_batch['estate']['latency_s']['hot']['p95']:.2f} s")


def most_tables(d: dict) -> int:
    """The most tables one batch committed, the start's batches left out (they read all that waits)."""
    return max(b["tables"] for b in d["batches"][5:])


def estate_long(cadence: dict, every_batch: dict) -> str:
    latency = cadence["estate"]["latency_s"]
    return (f"hot p95 {latency['hot']['p95']:.2f} s, cold p95 {latency['cold']['p95']:.1f} s; live data files per "
            f"table **at most {live_files_max(cadence)}** at every minute; at most {most_tables(cadence)} tables "
            f"committed in a batch; commit work "
            f"**{x(commit_work_ratio(cadence, every_batch))} less CPU** "
            f"({cadence['estate']['commit_work']['commit_cpu_seconds_per_batch']:.2f} s a batch)")


def v3_read(d: dict, keys: str) -> str:
    """The v3 table's worst read over the run (and the one after batch 100, just compacted) against v2's."""
    v3, v2 = d["v3"], d
    return (f"worst over the run **{x(v3['duckdb_ratio_maintained_worst'][keys])}** (v2 "
            f"{x(v2['duckdb_ratio_maintained_worst'][keys])}); after batch 100 "
            f"{x(v3['duckdb_ratio_maintained_last'][keys])}")


@dataclass(frozen=True)
class Row:
    """One headline figure: what was measured, the figure (from `source`), the target and whether it is met."""

    what: str
    source: str
    figure: Callable[[dict], str]
    target: str = ""
    met: Callable[[dict], bool] | None = None

    def cells(self) -> tuple[str, str, str, str]:
        data = load(self.source)
        verdict = "" if self.met is None else ("met" if self.met(data) else "missed")
        return self.what, self.figure(data), f"{self.target}: {verdict}" if verdict else self.target, self.source


#: The live job on one 2-core machine (local broker, registry emulator, SQLite catalog), `scripts/bench.py`.
JOB = (
    Row("throughput: 200 topics x 3 partitions, 2M records, one table per topic + a fan-in table",
        "throughput.json", lambda d: f"**{n(d['ours']['records_per_s'])} records/s** end to end",
        ">= 150,000 records/s", lambda d: d["ours"]["records_per_s"] >= 150_000),
    Row("the same against a hand-written foreachBatch job (pyiceberg appends, 200 topics)",
        "throughput.json", lambda d: f"**{x(d['vs_baseline'])}** ({n(d['baseline']['records_per_s'])} records/s)",
        ">= x10", lambda d: d["vs_baseline"] >= 10),
    Row("the same against one raw confluent-kafka consumer (no processing)",
        "throughput.json", lambda d: f"**{pct(d['ceiling_share'])}** of {n(d['ceiling']['records_per_s'])} records/s"
                                     f" (median of drains at {drains(d)})"
                                     f"{group_note(d)}",
        ">= 40%", lambda d: d["ceiling_share"] >= 0.40),
    Row("files per table after the throughput run",
        "throughput.json", lambda d: f"{d['files']['files_per_table_mean']} (mean {d['files']['mean_file_kb']:.0f} KiB)"),
    Row("scale: 500 topics -> 500 tables, 2M records, every batch commits all 500",
        "scale.json", lambda d: f"**{n(d['ours']['records_per_s'])} records/s** end to end",
        ">= 120,000 records/s", lambda d: d["ours"]["records_per_s"] >= 120_000),
    Row("the same: commit work of a 500-table batch",
        "scale.json", lambda d: f"{max(b['commit_work_s'] for b in d['batches']):.2f} s at most",
        "<= 5 s", lambda d: max(b["commit_work_s"] for b in d["batches"]) <= 5),
    Row("restart over 1,000 tables holding offsets: process start -> first batch running",
        "scale_1000.json", lambda d: f"**{d['after']['start_s_median']:.1f} s** median; commit work "
                                     f"{d['after']['commit_work_s_median']:.1f} s a 1,000-table batch",
        "start <= 10 s", lambda d: d["after"]["start_s_median"] <= 10),
    Row("freshness: 200 topics, 5,000 records/s, 2 s trigger, 10 min, small files merged at 16",
        "freshness_transient_codec.json",
        lambda d: f"commit time - record time p50 {d['latency_s']['p50']:.2f} s, **p95 {d['latency_s']['p95']:.2f} s**",
        "p95 <= 3 s", lambda d: d["latency_s"]["p95"] <= 3),
    Row("freshness: the same rate over 50 topics",
        "freshness_50_tables_checkpoint.json",
        lambda d: f"p50 {d['latency_s']['p50']:.2f} s, **p95 {d['latency_s']['p95']:.2f} s**",
        "p95 <= 3 s", lambda d: d["latency_s"]["p95"] <= 3),
    Row("30 minutes at 200 topics: live data files per table (merging + background compaction)",
        "freshness_30min_compaction_beside_merging.json", lambda d: f"**at most {live_files_max(d)}** at every minute",
        "<= 16", lambda d: live_files_max(d) <= 16),
    Row("estate: 200 topics, 20 carry 90% of 5,000 records/s, 2 s trigger, 5 min; hot tables commit every batch",
        "estate_cadence.json", lambda d: f"p50 {d['estate']['latency_s']['hot']['p50']:.2f} s, "
                                         f"**p95 {d['estate']['latency_s']['hot']['p95']:.2f} s**",
        "p95 <= 3 s", lambda d: d["estate"]["latency_s"]["hot"]["p95"] <= 3),
    Row("the same: the 180 cold tables (`commit_after: 60`)",
        "estate_cadence.json", lambda d: f"p50 {d['estate']['latency_s']['cold']['p50']:.1f} s, "
                                         f"**p95 {d['estate']['latency_s']['cold']['p95']:.1f} s**; live data files "
                                         f"per table at most {live_files_max(d)}; at most "
                                         f"{most_tables(d)} tables committed in a batch after the first 5",
        "p95 <= 63 s", lambda d: d["estate"]["latency_s"]["cold"]["p95"] <= 63),
    Row("the same: commit work per batch, against every table committing every batch (estate_every_batch.json, "
        "an earlier run on the same machine)",
        "estate_cadence.json", lambda d: estate_commit_work(d, load("estate_every_batch.json")),
        ">= x5 less", lambda d: commit_work_ratio(d, load("estate_every_batch.json")) >= 5),
    Row("the estate over 30 minutes: hot and cold tables, live data files, commit work (against the 5-minute "
        "every-batch run above)",
        "estate_cadence_30min.json",
        lambda d: estate_long(d, load("estate_every_batch.json")),
        "<= 16 files; >= x5 less", lambda d: live_files_max(d) <= 16
        and commit_work_ratio(d, load("estate_every_batch.json")) >= 5),
    Row("20 minutes at 200 topics: peak memory",
        "freshness_20min_memory.json",
        lambda d: f"driver {n(d['memory_peak_mb']['driver_python_mb'])} MB, all processes "
                  f"{n(d['memory_peak_mb']['all_mb'])} MB"),
    Row("soak: 20 tables, 2,000 records/s, 1 s trigger, 500 batches: per-table commit, last 10 / first 10 batches",
        "soak.json", lambda d: f"median **{x(d['commit_median_drift']['ratio'])}**, mean {x(d['commit_drift']['ratio'])}",
        "<= x1.5", lambda d: max(d["commit_drift"]["ratio"], d["commit_median_drift"]["ratio"]) <= 1.5),
    Row("Protobuf against Avro, same workload",
        "protobuf_e2e.json", lambda d: f"**{pct(d['protobuf_share_of_avro'])}** of the Avro rate "
                                       f"({n(d['records_per_s']['proto'])} against {n(d['records_per_s']['avro'])} records/s)",
        ">= 70%", lambda d: d["protobuf_share_of_avro"] >= d["target_share"]),
    Row("topics without a registry: the same records as plain JSON, columns inferred (200 topics)",
        "formats.json", lambda d: f"**{x(d['ratio_to_avro']['json'])}** the Avro rate "
                                  f"({n(d['records_per_s']['json'])} against {n(d['records_per_s']['avro'])} "
                                  f"records/s; {formats_runs(d)}); by run {per_run(d, 'json')}",
        ">= x0.8", lambda d: d["ratio_to_avro"]["json"] >= 0.8),
    Row("the same records read raw (key and value bytes)",
        "formats.json", lambda d: f"**{x(d['ratio_to_avro']['raw'])}** the Avro rate ({n(d['records_per_s']['raw'])} "
                                  f"records/s); by run {per_run(d, 'raw')}; rounds vary: {round_range(d)}; the run "
                                  f"before the JSON reader change: json "
                                  f"{x(load('formats_before.json')['ratio_to_avro']['json'])}, raw "
                                  f"{x(load('formats_before.json')['ratio_to_avro']['raw'])}",
        ">= x1.5", lambda d: d["ratio_to_avro"]["raw"] >= 1.5),
    Row("Debezium JSON (the JsonConverter's envelope) into 20 CDC tables",
        "upsert_json.json", lambda d: f"**{n(d['change_events_per_s'])} change events/s** (the median run; the "
                                      f"others {sibling_rates('upsert_json_run')}); upsert at "
                                      f"{pct(d['upsert_vs_append'])} of append{group_note(d)}; before the JSON "
                                      f"decoders' change {sibling_rates('upsert_json_before')}",
        ">= 50,000 events/s", lambda d: d["change_events_per_s"] >= 50_000),
    Row("change streams: upsert against append, same events",
        "upsert.json", lambda d: f"{n(d['change_events_per_s'])} change events/s; upsert at "
                                 f"{pct(d['upsert_vs_append'])} of append"),
    Row("upsert table of 2M rows, format v3 (deletion vectors), 100 batches of 2,000 keys, maintained as the job "
        "does (compacted at batches 50 and 100): DuckDB's read against the table compacted, every 10 batches", "upsert_read.json", lambda d: v3_read(d, "2000"),
        "<= x1.1", lambda d: d["v3"]["duckdb_ratio_maintained_worst"]["2000"] <= 1.1),
    Row("the same at 20,000 keys a batch", "upsert_read.json", lambda d: v3_read(d, "20000"),
        "<= x1.1", lambda d: d["v3"]["duckdb_ratio_maintained_worst"]["20000"] <= 1.1),
    Row("Prometheus metrics, one scrape a second, throughput workload",
        "metrics_overhead.json", lambda d: f"{d['metrics']['job_cpu_share_of_one_core'] * 100:.2f}% of one core"),
)

#: Parts measured alone, each against the code or library it replaced, in one process (scripts/bench_*.py).
COMPONENTS = (
    Row("one table commit, ours against pyiceberg's SqlCatalog and transaction", "commit.json",
        lambda d: f"{d['ms_per_commit']['ours']:.2f} ms against {d['ms_per_commit']['pyiceberg']:.2f} ms "
                  f"(**{x(d['speedup'])}**)"),
    Row("table creation, ours against pyiceberg's", "create.json",
        lambda d: f"{d['ours']['median_ms']:.2f} ms against {d['pyiceberg']['median_ms']:.2f} ms "
                  f"(**{x(d['ratio_median'])}**)"),
    Row("a manifest list and its 32 manifests read, reader trees cached per file schema", "avro_readers.json",
        lambda d: f"{d['scan']['cached_ms']:.2f} ms against {d['scan']['pyiceberg_ms']:.2f} ms (**{x(d['scan']['ratio'])}**)"),
    Row("one scheduled maintenance run (expire, compact, expire, delete)", "maintenance.json",
        lambda d: f"**{x(d['cpu_ratio'])}** less CPU"),
    Row("compaction memory: streamed against whole files", "compaction_memory.json",
        lambda d: f"Arrow pool peak {d['median']['stream']['pool_peak_mib']:.0f} MiB against "
                  f"{d['median']['windows']['pool_peak_mib']:.0f} MiB (**{x(d['ratio_windows_stream']['pool_peak_mib'])}**)"),
    Row("inline merge memory: streamed against whole files", "merge_memory.json",
        lambda d: f"Arrow pool peak {d['median']['new']['pool_peak_mib']:.0f} MiB against "
                  f"{d['median']['old']['pool_peak_mib']:.0f} MiB (**{x(d['ratio_old_new']['pool_peak_mib'])}**)"),
    Row("unframed JSON decoded to Arrow, columns inferred (12 fields, one core)", "json.json",
        lambda d: f"**{n(d['records_per_s']['ours: inferred json'])} records/s** (orjson + from_pylist "
                  f"{n(d['records_per_s']['orjson + from_pylist'])})"),
    Row("the source per Debezium JSON event (~2 KB, 20 topics x 3 read in 4 slices, one process)",
        "source_breakdown_debezium.json", lambda d: breakdown(d, load("source_breakdown_debezium_before.json"))),
    Row("the source per Avro value read raw (~490 B, 200 topics x 3 read whole, one process)",
        "source_breakdown_avro.json", lambda d: breakdown(d)),
    Row("Python workers warmed while the query starts: `icerouter demo`'s first batch", "warm_up.json",
        lambda d: f"{d['median']['on']['first_batch_dispatch_s']:.2f} s against "
                  f"{d['median']['off']['first_batch_dispatch_s']:.2f} s ({x(d['first_batch_off_over_on'])})"),
)


def table(rows: tuple[Row, ...], with_target: bool = True) -> str:
    head = ["| run | result | target | source |", "| --- | --- | --- | --- |"] if with_target else \
        ["| what | result | source |", "| --- | --- | --- |"]
    body = []
    for row in rows:
        what, figure, target, source = row.cells()
        link = f"`benchmarks/{source}`"
        body.append(f"| {what} | {figure} | {target} | {link} |" if with_target else f"| {what} | {figure} | {link} |")
    return "\n".join(head + body)


def job_table() -> str:
    return table(JOB)


def components_table() -> str:
    return table(COMPONENTS, with_target=False)


def readme_table() -> str:
    """The README's few headline figures: the first rows of the job table."""
    return table(JOB[:3] + JOB[7:8])


def cited_files() -> set[str]:
    return {row.source for row in JOB + COMPONENTS} | {"estate_every_batch.json",
                                                        "source_breakdown_debezium_before.json", "formats_before.json",
                                                        *(name for names in SIBLINGS.values() for name in names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the benchmark tables generated from benchmarks/*.json.")
    parser.parse_args(argv)
    print(job_table(), "", components_table(), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
