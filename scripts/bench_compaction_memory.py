"""The memory of one compaction of big files, whole-window reader vs streamed
(scripts/perf/components/compaction_memory.py).

    python scripts/bench_compaction_memory.py [--files 4] [--file-mib 24] [--reps 3] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.compaction_memory import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
