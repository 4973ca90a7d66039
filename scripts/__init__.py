"""Project tooling run from a checkout: benchmarks (perf/), fault drills (reliability/), the dev stack CLI.

The files directly in this directory are the command lines (`python scripts/bench.py ...`);
each hands over to a module of these packages. Nothing in router/, registry/ or evolution/
imports this package, and nothing here imports tests/ (tests/scripts/test_structure.py).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
