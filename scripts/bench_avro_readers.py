"""Manifest reads with cached reader trees against pyiceberg's own (scripts/perf/components/avro_readers.py).

    python scripts/bench_avro_readers.py [--manifests 32] [--tables 4] [--rounds 200] [--json FILE]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.perf.components.avro_readers import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
