"""One code path at a time against its baseline, in one process: each module is a scripts/bench_<name>.py."""
