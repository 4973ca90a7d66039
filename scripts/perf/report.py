"""Benchmark results out: JSON (the files in benchmarks/) and readable tables of the live modes.

Every benchmark ends with one result dict; `write_json` writes it as benchmarks/*.json hold
it, `emit` also prints it, `render` turns a live mode's dict into the table bench.py prints.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGETS = {
    "records_per_s": 100_000, "vs_baseline": 10.0, "ceiling_share": 0.40, "fresh_p95_s": 15.0,
    "commit_500_s": 5.0, "commit_drift": 1.5, "change_events_per_s": 50_000,
    "start_1000_s": 10.0, "memory_all_mb": 6 * 1024, "commit_1000_s": 5.0,
}

BATCH_COLUMNS = (("batch", "{:>5}"), ("records", "{:>9,}"), ("tables", "{:>6}"), ("source_s", "{:>8.2f}"),
                 ("decode_s", "{:>8.2f}"), ("evolve_s", "{:>8.2f}"), ("write_s", "{:>8.2f}"),
                 ("dispatch_s", "{:>10.2f}"), ("commit_s", "{:>8.2f}"), ("task_commit_s", "{:>13.2f}"),
                 ("commit_work_s", "{:>13.2f}"), ("total_s", "{:>7.2f}"), ("tables_per_s", "{:>12.1f}"))


def write_json(result: dict, path: str | Path) -> None:
    """`result` as a JSON file, one space of indent (values JSON has no type for as strings)."""
    Path(path).write_text(json.dumps(result, indent=1, default=str))


def emit(result: dict, json_file: str | None) -> int:
    """The component benchmarks' ending: the result printed as JSON, and written to `json_file`."""
    print(json.dumps(result, indent=1))
    if json_file:
        write_json(result, json_file)
    return 0


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def _batches(rows: list[dict], limit: int = 40) -> list[str]:
    head = " ".join(f"{name:>{len(fmt.format(0) if 'f' not in fmt else fmt.format(0.0))}}"
                    for name, fmt in BATCH_COLUMNS)
    out = ["per batch (source/decode/evolve/write/task_commit = task seconds summed over the Spark tasks; "
           "dispatch/commit/total = wall seconds on the driver; commit_work = commit + task_commit / executor "
           "cores; tables_per_s = tables / commit_work):", "  " + head]
    shown = rows if len(rows) <= limit else rows[: limit // 2] + [None] + rows[-limit // 2:]
    for row in shown:
        if row is None:
            out.append("  ...")
            continue
        out.append("  " + " ".join(fmt.format(row[name]) for name, fmt in BATCH_COLUMNS))
    return out


def render_throughput(r: dict) -> list[str]:
    ours = r["ours"]
    lines = [f"{r['mode']}: {r['topics']} topics x {r['partitions']} partitions, {r['records']:,} records of "
             f"~{r['value_bytes_mean']:.0f} B, {'one table per topic + one fan-in table' if r['fan_in'] else 'one table per topic'}, "
             f"commits in the {r.get('commit_in', 'driver')}; "
             f"load average before {r['load_before']} after {r['load_after']}",
             f"  produce rate (set-up)           {r['produce_records_per_s']:>12,} records/s"]
    ok = ours["records_per_s"] >= TARGETS["records_per_s"]
    lines.append(f"  icerouter end to end            {ours['records_per_s']:>12,} records/s  "
                 f"({ours['records_read']:,} records, {ours['rows_written']:,} rows, {ours['batches']} batches, "
                 f"{ours['seconds']:.1f} s first batch start -> last commit; {ours['seconds_from_query_start']:.1f} s "
                 f"from query start)  target >= {TARGETS['records_per_s']:,}: {_verdict(ok)}")
    if "ceiling" in r:
        share = ours["records_per_s"] / r["ceiling"]["records_per_s"]
        lines.append(f"  raw confluent-kafka consume     {r['ceiling']['records_per_s']:>12,} records/s  "
                     f"(one process, same data{_runs(r['ceiling'])}); our share {share:.0%}  target >= "
                     f"{TARGETS['ceiling_share']:.0%}: {_verdict(share >= TARGETS['ceiling_share'])}")
        r["ceiling_share"] = round(share, 3)
    if "baseline" in r:
        b = r["baseline"]
        ratio = ours["records_per_s"] / b["records_per_s"] if b["records_per_s"] else float("inf")
        lines.append(f"  hand-written baseline           {b['records_per_s']:>12,} records/s  "
                     f"(measured on {b['topics']} topics / {b['records']:,} records, compared as a rate); "
                     f"ours/baseline {ratio:.1f}x  target >= {TARGETS['vs_baseline']:.0f}x: "
                     f"{_verdict(ratio >= TARGETS['vs_baseline'])}")
        r["vs_baseline"] = round(ratio, 2)
    work = ours.get("commit_work_seconds", ours["commit_seconds"])
    lines.append(f"  tables committed                {ours['tables_committed']:>12,} in {work:.1f} s of commit work "
                 f"({ours['commit_seconds']:.1f} s driver phases + {ours.get('task_commit_seconds', 0):.1f} task-s / "
                 f"{r.get('executor_cores', 1)} cores) = {ours['tables_per_commit_s']:,.1f} tables/s; per-table commit p50 "
                 f"{r['commit_latency_s'].get('p50', 0) * 1000:.0f} ms, max {r['commit_latency_s'].get('max', 0) * 1000:.0f} ms")
    biggest = max((row.get("commit_work_s", row["commit_s"]) for row in r["batches"] if row["tables"] >= 500),
                  default=None)
    if biggest is not None:
        lines.append(f"  most commit work of a >=500-table batch {biggest:.2f} s  target <= "
                     f"{TARGETS['commit_500_s']:.0f} s: {_verdict(biggest <= TARGETS['commit_500_s'])}")
    m = r["memory_peak_mb"]
    lines.append(f"  peak RSS                        driver Python {m['driver_python_mb']:,.0f} MB, JVM "
                 f"{m['jvm_mb']:,.0f} MB, Python workers {m['workers_total_mb']:,.0f} MB together "
                 f"(largest single {m['worker_max_mb']:,.0f} MB)")
    f = r["files"]
    lines.append(f"  Parquet data files              {f['files']:,} in {f['tables']} tables: "
                 f"{f['files_per_table_mean']} per table (max {f['files_per_table_max']}), mean "
                 f"{f['mean_file_kb']:,.0f} KiB")
    if ours["dead_letters"] or ours["failed_tables"]:
        lines.append(f"  WARNING: {ours['dead_letters']} dead letters, {ours['failed_tables']} failed tables")
    return lines + _batches(r["batches"])


def render_freshness(r: dict) -> list[str]:
    lat = r["latency_s"]
    lines = [f"freshness: {r['topics']} topics, {r['rate']:,.0f} records/s for {r['duration']:.0f} s, trigger "
             f"{r['trigger']:.0f} s, {r['acked']:,} records produced, commits in the {r.get('commit_in', 'driver')}; "
             f"load average before {r['load_before']} "
             f"after {r['load_after']}",
             f"  commit time - record timestamp  p50 {lat['p50']:.2f} s  p95 {lat['p95']:.2f} s  max {lat['max']:.2f} s "
             f"over {lat['records']:,} records  target p95 <= {TARGETS['fresh_p95_s']:.0f} s: "
             f"{_verdict(lat['p95'] <= TARGETS['fresh_p95_s'])}"]
    drift = r.get("commit_drift")
    if drift:
        lines.append(f"  per-table commit latency        first 10 batches {drift['first10_ms']:.0f} ms, last 10 "
                     f"{drift['last10_ms']:.0f} ms: x{drift['ratio']:.2f}  target <= {TARGETS['commit_drift']}: "
                     f"{_verdict(drift['ratio'] <= TARGETS['commit_drift'])}")
    m = r["memory_peak_mb"]
    lines.append(f"  peak RSS                        driver Python {m['driver_python_mb']:,.0f} MB, JVM "
                 f"{m['jvm_mb']:,.0f} MB, Python workers {m['workers_total_mb']:,.0f} MB together")
    f = r["files"]
    lines.append(f"  Parquet data files              {f['files']:,} in {f['tables']} tables, "
                 f"{f['files_per_table_mean']} per table, mean {f['mean_file_kb']:,.0f} KiB")
    if r.get("maintenance"):
        lines.append(_compaction(r["maintenance"]))
    lines.append("  over time (per batch: records, commit phase, per-table commit median / max, "
                 "latency p95 of its records):")
    for row in r["timeline"]:
        lines.append(f"    batch {row['batch']:>4} at {row['t']:>6.0f} s: {row['records']:>7,} records, commit "
                     f"{row['commit_s']:5.2f} s, per table {row['table_p50_ms']:5.0f} / {row['table_max_ms']:5.0f} ms, "
                     f"p95 {row['p95_s']:5.2f} s")
    return lines + _batches(r["batches"])


def _drift(d: dict | None, unit: str, scale: float = 1.0, digits: int = 1) -> str:
    if not d:
        return "not measured (too few batches, or no per-table commit records)"
    return (f"first {d['n']} batches {d['first'] * scale:.{digits}f} {unit}, last {d['n']} "
            f"{d['last'] * scale:.{digits}f} {unit}: x{d['ratio'] if d['ratio'] is not None else float('nan'):.2f}")


def _retried(r: dict | None) -> str:
    if not r:
        return "not recorded"
    d = r["drift"]
    per_batch = f"; per batch, first {d['n']} {d['first']:.1f}, last {d['n']} {d['last']:.1f}" if d else ""
    return f"{r['total']:,} in all (to another committer, compaction above all){per_batch}"


def _compaction(m: dict) -> str:
    """The job's background compaction totals (housekeeping.BackgroundMaintenance.totals)."""
    return (f"  background compaction           {m['runs']} runs ({m['failed']} failed), "
            f"{m['files_removed']:,} files -> {m['files_added']:,}; "
            f"{m.get('replaced_deleted', 0):,} replaced files deleted once unreferenced")


def _memory(m: dict) -> str:
    text = (f"driver Python {m['driver_python_mb']:,.0f} MB, JVM {m['jvm_mb']:,.0f} MB, Python workers "
            f"{m['workers_total_mb']:,.0f} MB together")
    if "executors_jvm_mb" in m:
        text += f", executor JVMs {m['executors_jvm_mb']:,.0f} MB together"
    return text


def _within(d: dict | None) -> bool:
    return d is not None and d["ratio"] is not None and d["ratio"] <= TARGETS["commit_drift"]


def render_soak(r: dict) -> list[str]:
    d = r["commit_drift"]
    ok = _within(d)
    s = r["snapshots_at_end"]
    lines = [f"soak (live job): {r['ran_batches']} batches over {r['tables']} tables in {r['seconds']:,.0f} s, "
             f"{r['rate']:,.0f} records/s, trigger {r['trigger']:g} s, commits in the {r['commit_in']}; expire every "
             f"{r['expire_every']} commits keeping {r['retain_last']} snapshots younger than {r['max_snapshot_age']} s; "
             f"load average before {r['load_before']} after {r['load_after']}",
             f"  per-table commit, mean          {_drift(d, 'ms')}  target <= {TARGETS['commit_drift']}: "
             f"{_verdict(ok)}",
             f"  per-table commit, median        {_drift(r.get('commit_median_drift'), 'ms')}  target <= "
             f"{TARGETS['commit_drift']}: {_verdict(_within(r.get('commit_median_drift')))}",
             f"  per-table commit, CPU time      {_drift(r.get('commit_cpu_drift'), 'ms')}  (the commit's own "
             "work; wall time above adds waiting for a core)",
             f"  same, with pyiceberg's threads  {_drift(r.get('commit_process_cpu_drift'), 'ms')}  (the task "
             "process's CPU time during the commit: adds manifest writing on pyiceberg's thread pool)",
             f"  driver commit phase             {_drift(r['commit_phase_drift'], 's', digits=3)}",
             f"  batch total                     {_drift(r['batch_drift'], 's', digits=3)}",
             f"  dead-letter table commit        {_drift(r['dlq_commit_drift'], 'ms')}",
             f"  commits that lost a swap        {_retried(r.get('retried_commits'))}",
             f"  snapshots per table at the end  mean {s['mean']} (min {s['min']}, max {s['max']}, "
             f"{s['tables']} tables); dead-letter table {r['dlq_snapshots_at_end']['max']}",
             f"  peak RSS                        {_memory(r['memory_peak_mb'])}",
             "  over time (mean per batch: records, per-table commit wall / CPU, commit phase, batch total; max lag):"]
    if r.get("maintenance"):
        lines.insert(-1, _compaction(r["maintenance"]))
    cores = r.get("cores_first_last")
    if cores:
        lines.insert(-1, "  cores taken, first -> last span  " + ", ".join(
            f"{k} {a:.2f} -> {b:.2f}" for k, (a, b) in cores.items() if max(a, b) >= 0.01))
    for row in r["timeline"]:
        mean = f"{row['table_mean_ms']:6.1f}" if row["table_mean_ms"] is not None else "     -"
        cpu = f" / {row['table_cpu_ms']:5.1f}" if row.get("table_cpu_ms") is not None else ""
        lag = "-" if row["lag"] is None else f"{row['lag']:,}"
        lines.append(f"    batches {row['from']:>4}-{row['to']:<4} at {row['t']:>6.0f} s: {row['records']:>6,} records, "
                     f"per table {mean}{cpu} ms, commit {row['commit_s']:.3f} s, total {row['total_s']:.3f} s, lag {lag}")
    return lines


SCALING_COLUMNS = (("name", "{:<18}"), ("commit_in", "{:<7}"), ("tables_per_batch", "{:>13.1f}"),
                   ("batch_s", "{:>8.2f}"), ("tables_per_s", "{:>9.1f}"), ("dispatch_s", "{:>10.2f}"),
                   ("commit_s", "{:>8.2f}"), ("table_commit_p50_ms", "{:>10.1f}"))


def render_scaling(r: dict) -> list[str]:
    lines = [f"commit-scaling: {r['topics']} topics -> {r['topics']} tables, {r['records_per_topic']} records per "
             f"topic per batch, {r['measured_batches']} measured batches after one warm-up batch per configuration; "
             f"load average before {r['load_before']} after {r['load_after']}",
             "  tables/s = tables committed / batch seconds; dispatch and commit = driver wall seconds per batch",
             "  " + " ".join(["configuration".ljust(18), "commits", "tables/batch", " batch_s", " tables/s",
                              "dispatch_s", "commit_s", "p50 ms/tbl"]) + "  peak RSS"]
    for c in r["configurations"]:
        if c["status"] != "ok":
            why = c["reason"].strip().splitlines()[-1] if c["reason"].strip() else "?"
            lines.append(f"  {c['name']:<18} {c['commit_in']:<7} {c['status'].upper()}: {why[:160]}")
            continue
        cells = [fmt.format(c[k] if c[k] is not None else float("nan")) for k, fmt in SCALING_COLUMNS]
        lines.append("  " + " ".join(cells) + "  " + _memory(c["memory_peak_mb"]))
    return lines


def render_upsert(r: dict) -> list[str]:
    lines = [f"upsert: {r['topics']} Debezium topics x {r['partitions']} partitions -> {r['topics']} CDC tables, "
             f"{r['snapshot_rows_per_topic']:,} snapshot rows then {r['changes_per_topic']:,} changes per topic "
             f"(70/20/10 updates/inserts/deletes), batches of {r['batch_records']:,} records ({r['catch_up']}), "
             f"commits in the {r['commit_in']}; load average before {r['load_before']} after {r['load_after']}"]
    for phase, p in r["phases"].items():
        made = p["produced"]
        lines.append(f"  {phase}: {made['events']:,} events + {made['tombstones']:,} tombstones")
        for name in ("append", "upsert"):
            j = p[name]
            work = j["commit_work_s"]
            lines.append(f"    {name:<7} {j['events_per_s']:>9,} events/s  {j['batches']} batches in {j['seconds']:.1f} s, "
                         f"{j['rows_written']:,} rows written; commit work {work['total']:.2f} s "
                         f"({work['per_batch_mean']:.2f} s a batch, max {work['per_batch_max']:.2f}; "
                         f"{j['share_of_time_committing']:.0%} of the time), per-table commit p50 "
                         f"{j['table_commit_s'].get('p50', 0) * 1000:.0f} ms")
        lines.append(f"    upsert/append {p['upsert_vs_append']:.2f}; checked: {p['check']['upsert']['rows']:,} upsert "
                     f"rows match their scripts, {p['check']['append']['rows']:,} append rows")
    ok = r["change_events_per_s"] >= TARGETS["change_events_per_s"]
    lines.append(f"  change events/s (changes phase)  {r['change_events_per_s']:>9,}  target >= "
                 f"{TARGETS['change_events_per_s']:,}: {_verdict(ok)}; upsert/append {r['upsert_vs_append']:.2f}")
    t = r["tables_at_end"]["upsert"]
    lines.append(f"  upsert tables at the end: data files {t['data_files']['mean']} (max {t['data_files']['max']}), "
                 f"delete files {t['delete_files']['mean']} (max {t['delete_files']['max']}), deleted positions "
                 f"{t['position_deletes']['mean']:,.0f}, rows in data files {t['records']['mean']:,.0f} per table (mean)")
    lines.append(f"  peak RSS                        {_memory(r['memory_peak_mb'])}")
    return lines + _batches(r["phases"]["changes"]["upsert"]["per_batch"])


def _runs(ceiling: dict) -> str:
    runs = ceiling.get("runs_records_per_s")
    return f", median of {', '.join(f'{n:,}' for n in runs)}" if runs and len(runs) > 1 else ""


def render_protobuf(r: dict) -> list[str]:
    rates, share = r["records_per_s"], r["protobuf_share_of_avro"]
    runs = {fmt: ", ".join(f"{x['records_per_s']:,}" for x in r["runs"][fmt]) for fmt in ("avro", "proto")}
    return [f"protobuf: {r['topics_per_format']} topics x {r['partitions']} partitions per format, "
            f"{r['records_per_format']:,} records each (Avro ~{r['value_bytes_mean']['avro']:.0f} B, Protobuf "
            f"~{r['value_bytes_mean']['proto']:.0f} B); load average before {r['load_before']} after {r['load_after']}",
            f"  the job on Avro topics          {rates['avro']:>12,} records/s (median of "
            f"{runs['avro']})",
            f"  the job on Protobuf topics      {rates['proto']:>12,} records/s (median of "
            f"{runs['proto']}); {share:.0%} of Avro  "
            f"target >= {r['target_share']:.0%}: {_verdict(r['within_target'])}"]


def render_formats(r: dict) -> list[str]:
    lines = [f"formats: {r['topics']} topics x {r['partitions']} partitions per topic set, {r['records_per_format']:,} "
             f"records each (sizes {r['value_bytes_mean']}); load average before {r['load_before']} after {r['load_after']}"]
    for fmt, rate in r["records_per_s"].items():
        runs = ", ".join(f"{x['records_per_s']:,}" for x in r["runs"][fmt])
        target = r["targets"].get(fmt)
        verdict = f"  target >= {target:.2f}x: {_verdict(r['within_targets'][fmt])}" if target else ""
        lines.append(f"  {fmt:<30}  {rate:>12,} records/s (median of {runs}); {r['ratio_to_avro'][fmt]:.2f}x Avro{verdict}")
    return lines


def render_scale_start(r: dict) -> list[str]:
    lines = [f"scale1000: {r['topics']} topics x {r['partitions']} partitions -> {r['topics']} tables holding offsets, "
             f"{r['batches_per_start']} batches per start; load average before {r['load_before']} after {r['load_after']}"]
    for label in ("before", "after"):
        if label in r:
            s = r[label]
            lines.append(f"  {label:<6} start (process -> first batch running) {s['start_s_median']} s "
                         f"[{_verdict(s['start_s_median'] <= TARGETS['start_1000_s'])}], all processes peak "
                         f"{s['memory_all_mb_max']:.0f} MB [{_verdict(s['memory_all_mb_max'] <= TARGETS['memory_all_mb'])}], "
                         f"commit work per {r['topics']}-table batch {s['commit_work_s_median']} s "
                         f"[{_verdict((s['commit_work_s_median'] or 0) <= TARGETS['commit_1000_s'])}]")
            for run in r["starts"][label]:
                lines.append(f"    {run['start_s']} s: {run['parts_s']}; {run.get('commit_per_full_batch')}")
    return lines


def render(result: dict) -> str:
    mode = result["mode"]
    if mode == "freshness":
        lines = render_freshness(result)
    elif mode == "soak":
        lines = render_soak(result)
    elif mode == "commit-scaling":
        lines = render_scaling(result)
    elif mode == "upsert":
        lines = render_upsert(result)
    elif mode == "protobuf":
        lines = render_protobuf(result)
    elif mode == "formats":
        lines = render_formats(result)
    elif mode == "scale1000":
        lines = render_scale_start(result)
    else:
        lines = render_throughput(result)
    return "\n".join(["", *lines])
