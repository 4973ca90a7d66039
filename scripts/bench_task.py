"""One Spark task's write path in process (scripts/perf/components/task.py).

    python scripts/bench_task.py [--records 125000] [--topics 50] [--rounds 5] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.task import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
