"""The order in which the test files start, for the two pytest-xdist workers.

The workers take whole files (`--dist loadfile`). pytest-xdist's own order puts the files with the
most tests first, which are the quick unit-test files: the end-to-end files (one or two tests of one
to three minutes each) then came last, and one worker could still be running two of them while the
other had nothing left. Started first, longest first, they run beside each other and the many short
files fill in around them. `--no-loadscope-reorder` (pyproject.toml) makes pytest-xdist keep the
order set here.
"""

from __future__ import annotations

#: The files whose tests take longest, longest first: seconds per file summed over its tests in a
#: run of the whole suite on 2 workers (the shared 2-core machine). A file not named here starts
#: after these, the end-to-end files (marked slow) before the others.
LONGEST_FIRST = (
    "tests/router/driver/test_job_cluster_e2e.py",     # 215 s, with the cluster's start
    "tests/router/driver/test_backfill_e2e.py",        # 182 s
    "tests/router/driver/test_job_merge_e2e.py",       # 176 s
    "tests/router/operations/test_replay.py",          # 139 s over 60 quick tests
    "tests/router/driver/test_cdc_e2e.py",             # 128 s
    "tests/router/operations/test_lag_e2e.py",         # 108 s
    "tests/router/reliability/test_faults.py",         # 108 s
    "tests/router/reliability/test_checkpoints.py",    # 106 s
    "tests/router/driver/test_job_e2e.py",             # 104 s
    "tests/router/driver/test_unframed_e2e.py",        # 94 s
    "tests/router/driver/test_secrets_e2e.py",         # 87 s
    "tests/router/cli/test_demo.py",                   # 79 s
    "tests/router/driver/test_lease_e2e.py",           # 75 s
    "tests/router/reliability/test_cadence.py",        # 61 s alone
    "tests/router/driver/test_metrics_e2e.py",         # 56 s
    "tests/router/driver/test_consumer_group_e2e.py",  # 49 s
    "tests/router/reliability/test_concurrent_writers.py",  # 44 s
    "tests/router/operations/test_ledger_scenarios.py",  # 47 s over 40 quick tests
    "tests/router/driver/test_session.py",             # 45 s
    "tests/router/deploy/test_pack.py",                # 38 s
    "tests/router/operations/test_status.py",          # 38 s
    "tests/test_lean_install.py",                      # 34 s
)


def _file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


def order_files(items: list) -> None:
    """Sort `items` in place by file (LONGEST_FIRST, then files with a slow test, then by how many
    tests a file has, as pytest-xdist would); a file's tests stay together and in their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    counts: dict[str, int] = {}
    slow: set[str] = set()
    first_seen: dict[str, int] = {}
    for position, item in enumerate(items):
        name = _file_of(item)
        counts[name] = counts.get(name, 0) + 1
        first_seen.setdefault(name, position)
        if item.get_closest_marker("slow") is not None:
            slow.add(name)

    def key(indexed) -> tuple:
        position, item = indexed
        name = _file_of(item)
        return (rank.get(name, len(rank)), name not in slow, -counts[name], first_seen[name], position)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def pytest_collection_modifyitems(config, items) -> None:
    """Longest files first (order_files); hooked in from tests/conftest.py."""
    order_files(items)
