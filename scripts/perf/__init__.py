"""The benchmarks: a shared core, the live job's modes (live/) and single code paths (components/).

Core: workload.py (the Avro orders, payload pools, producers, raw consume), retention.py
(record retention on the local broker), config.py (bench catalogs, the job's config, the
narrow commit table), services.py (broker + registry of a live run), probe.py (memory, CPU,
per-batch and per-commit records), stats.py (start-against-end drift), report.py (JSON
files and printed tables), pyspy.py (optional py-spy profile), baseline.py (the hand-written
pipeline the throughput mode compares with).

live/cli.py is scripts/bench.py: throughput and scale (throughput.py), freshness, soak and
commit-scaling (scaling.py), upsert (upsert.py), one `run_*(args, stack, root) -> dict` each. Every module of
components/ is one scripts/bench_<name>.py with its own `main(argv)`. Modes import the core,
never each other's entry points; the core imports no mode.
"""
