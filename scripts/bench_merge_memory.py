"""The memory of one inline small-file merge, old reader vs streamed (scripts/perf/components/merge_memory.py).

    python scripts/bench_merge_memory.py [--files 24] [--file-kib 1250] [--reps 5] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.merge_memory import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
