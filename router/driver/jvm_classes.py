"""Class-data sharing for the driver's JVM: Spark's classes mapped from an archive at start instead
of loaded from its jars (JDK dynamic AppCDS). On 2 cores, with the job's settings: the session
6.3-6.6 s -> 3.8-4.1 s, its first query 3.0-3.4 s -> 1.7-1.9 s (scripts/perf, benchmarks/scale_1000.json).

A restart without an archive (its checkpoint holds a committed batch: a job's first run may be
its only one, as a demo's or a test's) records the classes its JVM loaded, at the JVM's exit
(-XX:ArchiveClassesAtExit: seconds of work and ~160 MB), into a dump file beside the job's
local checkpoint. A later start
checks a finished dump with a JVM of its own on the classpath of its driver (-Xshare:on refuses
an archive that does not fit this JDK and classpath; a cut-off file crashes that JVM, never the
driver's) and only then renames it into place; the JVM after it maps it with -Xshare:auto, which
ignores an archive that does not fit. The archive's name carries a key of the JDK, Spark's jars
and the driver's JVM settings, so a change of any of them records a new one (the old is removed).
Off when spark-submit started the driver's JVM, when the checkpoint is not on a local disk, and
when `spark.driver.extraJavaOptions` or SPARK_SUBMIT_OPTS already says how to share classes (-Xshare,
CDS flags: two archives in one JVM's options would keep it from starting).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

log = logging.getLogger("icerouter.job")

ARCHIVE_SUFFIX = ".jsa"
DUMP_SUFFIX = ".dump"
CLASSPATH_SUFFIX = ".classpath"
#: a dump this recent may still be written by its JVM (which writes at exit, after the driver ended)
DUMP_SETTLE_SECONDS = 30.0
CHECK_TIMEOUT_SECONDS = 60.0
USER_FLAGS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "AutoCreateSharedArchive", "DumpLoadedClassList")
QUIET = "-Xlog:cds*=off"  # the JVM's CDS warnings (signed jars skipped, an archive that does not fit)


def state_dir(checkpoint: str) -> Path | None:
    """`<checkpoint>/icerouter/jvm` for a checkpoint on a local disk, else None."""
    if not checkpoint or ("://" in checkpoint and not checkpoint.startswith("file:")):
        return None
    return Path(checkpoint.removeprefix("file://").removeprefix("file:")) / "icerouter" / "jvm"


def java_binary() -> str | None:
    """The java that pyspark's launcher runs: $JAVA_HOME/bin/java, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(found) if found and os.path.exists(found) else None


def archive_key(settings: dict[str, str], java: str) -> str | None:
    """What an archive depends on: the JDK, Spark's jars and the driver's JVM settings."""
    from pyspark.find_spark_home import _find_spark_home

    release = Path(java).parent.parent / "release"
    jars = Path(_find_spark_home()) / "jars"
    try:
        listing = sorted(f"{p.name}:{p.stat().st_size}" for p in jars.iterdir())
        jdk = release.read_text() if release.exists() else str(Path(java).stat().st_mtime)
    except OSError:
        return None
    # system properties (-D...) do not change which archive fits; JVM flags (heap, GC) may
    flags = [o for o in shlex.split(settings.get("spark.driver.extraJavaOptions", "")) if not o.startswith("-D")]
    parts = [java, jdk, str(jars), *listing, *flags] + [f"{k}={settings.get(k, '')}" for k in (
        "spark.driver.extraClassPath", "spark.driver.memory")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def sharing_options(checkpoint: str, settings: dict[str, str]) -> tuple[str, Path | None]:
    """JVM options for the driver's next JVM and the dump it records at exit (None: it records none).

    A finished dump is checked first (a JVM of its own, ~0.3 s, once per archive); then the archive
    is mapped if there is one, else this JVM records one unless a dump waits for its check."""
    folder = state_dir(checkpoint)
    java = java_binary()
    own = f"{settings.get('spark.driver.extraJavaOptions', '')} {os.environ.get('SPARK_SUBMIT_OPTS', '')}"
    if folder is None or java is None or any(flag in own for flag in USER_FLAGS):
        return "", None
    key = archive_key(settings, java)
    if key is None:
        return "", None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        archive = settle(folder, key, java)
    except OSError:
        return "", None
    if archive is not None:
        return f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET}", None
    if not restarted(checkpoint) or any(folder.glob(f"driver-{key}.*{DUMP_SUFFIX}")):
        return "", None  # a first run may be the only one (a demo, a test); one dump at a time
    dump = folder / f"driver-{key}.{os.getpid()}{DUMP_SUFFIX}"
    return f"-XX:ArchiveClassesAtExit={dump} {QUIET}", dump


def restarted(checkpoint: str) -> bool:
    """True when an earlier run of the job committed a batch to this checkpoint."""
    return (Path(checkpoint.removeprefix("file://").removeprefix("file:")) / "commits").is_dir()


def note_classpath(spark, dump: Path) -> None:
    """The classpath of the JVM that records `dump`, which the dump's check runs with."""
    record_classpath(dump, spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path"))


def record_classpath(dump: Path, classpath: str) -> None:
    with contextlib.suppress(OSError):
        (dump.parent / f"{dump.name.split('.')[0]}{CLASSPATH_SUFFIX}").write_text(classpath)


def archive_fits(java: str, archive: Path, classpath: str) -> bool:
    """A JVM of its own maps `archive` with -Xshare:on (refused, or crashed, unless it fits)."""
    try:
        done = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={archive}", QUIET,
                               f"-XX:ErrorFile={os.devnull}", "-XX:-CreateCoredumpOnCrash", "-cp", classpath,
                               "-version"], cwd=archive.parent, capture_output=True, timeout=CHECK_TIMEOUT_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def settle(folder: Path, key: str, java: str, now: float | None = None) -> Path | None:
    """Check the finished dumps of `key` and rename the first that fits into place; remove the ones
    that do not, and the files of other keys. Returns the archive in place, if any."""
    now = time.time() if now is None else now
    archive, noted = folder / f"driver-{key}{ARCHIVE_SUFFIX}", folder / f"driver-{key}{CLASSPATH_SUFFIX}"
    for path in sorted(folder.glob("driver-*")):
        with contextlib.suppress(OSError):
            if path in (archive, noted) or now - path.stat().st_mtime < DUMP_SETTLE_SECONDS:
                continue  # a dump this recent may still be written
            if path.name.startswith(f"driver-{key}.") and path.name.endswith(DUMP_SUFFIX):
                classpath = noted.read_text() if noted.exists() else None
                if classpath and not archive.exists() and archive_fits(java, path, classpath):
                    os.replace(path, archive)
                    log.info("start: the driver's JVM maps its classes from %s", archive)
                    continue
            path.unlink()  # a dump that does not fit, or the files of another JDK, Spark or JVM setting
    return archive if archive.exists() else None
