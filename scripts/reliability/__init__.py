"""Reliability scenarios as plain functions: run by scripts/faults.py and asserted by tests/router/reliability.

scenarios.py (shared pieces, bad input), outages.py (SIGKILL and service outages),
concurrency.py (two jobs and a pyiceberg appender), checkpoints.py (lost, old and fresh
checkpoints); helpers.py is their plumbing (configs, job processes, the ledger, DuckDB
read-back), appender.py the third writer's process, drills.py the fault-drill command.
"""
