"""The Java reference reader's environment: a venv of its own with Spark 3.5 and Iceberg's runtime jar.

The project runs pyspark 4.3; Iceberg's Spark runtime on PyPI (snowpark-connect-deps-iceberg)
is built for Spark 3.5, so it gets a cached venv beside the project's, never inside it. Its
missing relocated Jackson is built once from Spark 3.5's own (tests/javaref/relocate.py).

``python3 -m tests.javaref.environment`` sets it up (CI does, in .ci/run); tests find it with
:func:`find_reference`. ``ICEROUTER_JAVAREF_HOME`` moves the cache (default
``~/.cache/icerouter/javaref``).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.javaref.relocate import relocate_jars

PYSPARK = "pyspark==3.5.7"
ICEBERG = "snowpark-connect-deps-iceberg==1.0.3"
RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
EXTENSIONS_JAR = "iceberg-spark-extensions-3.5_2.12-1.10.2.jar"
JACKSON_JARS = ("jackson-core-2.15.2.jar", "jackson-databind-2.15.2.jar", "jackson-annotations-2.15.2.jar")
SHADED_JAR = "iceberg-shaded-jackson-2.15.2.jar"


@dataclass(frozen=True)
class Reference:
    """Where the reader's Python and jars are."""

    python: str
    jars: tuple[str, ...]


def home() -> Path:
    return Path(os.environ.get("ICEROUTER_JAVAREF_HOME") or Path.home() / ".cache" / "icerouter" / "javaref")


def _marker() -> Path:
    return home() / "ready.json"


def find_reference() -> Reference | None:
    """The set-up reader, or None when it is not (or was set up for other versions)."""
    try:
        doc = json.loads(_marker().read_text())
    except (OSError, ValueError):
        return None
    if doc.get("packages") != [PYSPARK, ICEBERG]:
        return None
    ref = Reference(doc["python"], tuple(doc["jars"]))
    return ref if all(os.path.exists(p) for p in (ref.python, *ref.jars)) else None


def _site_packages(python: str) -> Path:
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def ensure_reference() -> Reference:
    """Set the reader up once (under a lock: pytest-xdist workers may ask together); raises on failure."""
    root = home()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_reference()
        if found is not None:
            return found
        venv = root / "venv"
        python = venv / "bin" / "python"
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", PYSPARK, ICEBERG],
                       check=True)
        site = _site_packages(str(python))
        iceberg = site / "snowpark_connect_deps_iceberg" / "jars"
        shaded = root / SHADED_JAR
        relocate_jars([str(site / "pyspark" / "jars" / j) for j in JACKSON_JARS], str(shaded) + ".tmp")
        os.replace(str(shaded) + ".tmp", shaded)
        jars = [str(iceberg / RUNTIME_JAR), str(iceberg / EXTENSIONS_JAR), str(shaded)]
        _marker().write_text(json.dumps({"packages": [PYSPARK, ICEBERG], "python": str(python), "jars": jars}))
        return Reference(str(python), tuple(jars))


def main() -> int:
    started = time.monotonic()
    ref = ensure_reference()
    print(f"javaref: {ref.python} with {len(ref.jars)} jars ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
