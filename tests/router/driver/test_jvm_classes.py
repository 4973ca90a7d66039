"""Class-data sharing for the driver's JVM (router/driver/jvm_classes.py), with real JVMs: a dump
recorded at a JVM's exit, checked and renamed into place, mapped by the next JVM; cut-off and
foreign archives never reach a JVM that must start, and one that does not fit is ignored."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

from router.driver import jvm_classes as jc
from tests.jvm_archive import TEST_JVM_OPTIONS

JAVA = jc.java_binary()
CLASSPATH = str(Path(_find_spark_home()) / "jars" / "*")
SETTINGS = {"spark.driver.memory": "1g", "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:x"}
LATER = time.time() + 3600  # every file counts as finished

pytestmark = pytest.mark.skipif(JAVA is None, reason="no java")


@pytest.fixture(autouse=True)
def _no_session_archive(monkeypatch):
    """The test session's own archive (tests/jvm_archive.py) out of the options these tests compute."""
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)


def java(options: str, classpath: str = CLASSPATH, main: tuple[str, ...] = ("-version",)) -> subprocess.CompletedProcess:
    return subprocess.run([JAVA, *shlex.split(options), "-cp", classpath, *main], capture_output=True, text=True,
                          env={**os.environ, "SPARK_HOME": _find_spark_home()}, timeout=120)


def recorded(checkpoint: Path, settings=SETTINGS) -> Path:
    """What a restart does: its JVM records a dump at exit, its classpath noted beside it."""
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)  # an earlier run committed a batch
    options, dump = jc.sharing_options(str(checkpoint), settings)
    assert options.startswith("-XX:ArchiveClassesAtExit=") and dump is not None
    assert dump.parent == checkpoint / "icerouter" / "jvm"
    # Spark's launcher (it stops at once here; the JVM records at any exit) loads classes of this classpath
    launcher = java(options, main=("org.apache.spark.launcher.Main", "org.apache.spark.deploy.SparkSubmit"))
    assert dump.exists(), launcher.stderr
    jc.record_classpath(dump, CLASSPATH)
    return dump


def test_where_archives_live():
    assert jc.state_dir("/data/ckpt") == Path("/data/ckpt/icerouter/jvm")
    assert jc.state_dir("file:///data/ckpt") == Path("/data/ckpt/icerouter/jvm")
    assert jc.state_dir("s3a://bucket/ckpt") is None and jc.state_dir("") is None
    assert jc.sharing_options("s3a://bucket/ckpt", SETTINGS) == ("", None)


def test_a_recorded_dump_is_checked_renamed_and_mapped(tmp_path):
    dump = recorded(tmp_path)
    # the next start soon after: the dump may still be written, so it is neither used nor recorded again
    assert jc.sharing_options(str(tmp_path), SETTINGS) == ("", None)
    key = jc.archive_key(SETTINGS, JAVA)
    archive = jc.settle(dump.parent, key, JAVA, now=LATER)
    assert archive == dump.parent / f"driver-{key}.jsa" and not dump.exists()
    options, again = jc.sharing_options(str(tmp_path), SETTINGS)
    assert options.startswith(f"-XX:SharedArchiveFile={archive} -Xshare:auto") and again is None
    mapped = java(options.replace("-Xlog:cds*=off", "-Xlog:cds=info"))
    assert mapped.returncode == 0 and "Mapped dynamic region" in mapped.stdout


def test_a_cut_off_or_foreign_dump_is_removed_and_recorded_again(tmp_path):
    dump = recorded(tmp_path)
    data = dump.read_bytes()
    os.chmod(dump, 0o644)
    dump.write_bytes(data[: len(data) // 2])  # the JVM was killed while writing it
    assert not jc.archive_fits(JAVA, dump, CLASSPATH)  # its check crashed, in a JVM of its own
    key = jc.archive_key(SETTINGS, JAVA)
    assert jc.settle(dump.parent, key, JAVA, now=LATER) is None and not dump.exists()
    garbage = dump.parent / f"driver-{key}.1.dump"
    garbage.write_bytes(b"\0" * 4096)
    assert jc.settle(dump.parent, key, JAVA, now=LATER) is None and not garbage.exists()
    assert jc.sharing_options(str(tmp_path), SETTINGS)[0].startswith("-XX:ArchiveClassesAtExit=")


def test_an_archive_that_does_not_fit_is_ignored_by_the_jvm(tmp_path):
    dump = recorded(tmp_path)
    assert not jc.archive_fits(JAVA, dump, str(tmp_path))  # another classpath: refused by the check
    assert java(f"-XX:SharedArchiveFile={dump} -Xshare:auto {jc.QUIET}", str(tmp_path)).returncode == 0


def test_other_settings_record_their_own_archive_and_drop_the_old(tmp_path):
    dump = recorded(tmp_path)
    key = jc.archive_key(SETTINGS, JAVA)
    assert jc.settle(dump.parent, key, JAVA, now=LATER) is not None
    bigger = {**SETTINGS, "spark.driver.memory": "2g"}
    other = jc.archive_key(bigger, JAVA)
    assert other != key
    assert jc.settle(dump.parent, other, JAVA, now=LATER) is None
    assert not list(dump.parent.glob(f"driver-{key}*"))
    # a system property (the log4j file of another install) fits the same archive
    moved = {**SETTINGS, "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:y"}
    assert jc.archive_key(moved, JAVA) == key
    assert jc.archive_key({**SETTINGS, "spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}, JAVA) != key


def test_a_first_run_records_nothing(tmp_path):
    assert jc.sharing_options(str(tmp_path / "new"), SETTINGS) == ("", None)
    assert jc.sharing_options(str(tmp_path), SETTINGS) == ("", None)  # no batch committed yet
    (tmp_path / "commits").mkdir()
    assert jc.sharing_options(str(tmp_path), SETTINGS)[0].startswith("-XX:ArchiveClassesAtExit=")


def test_own_sharing_flags_turn_it_off(tmp_path):
    (tmp_path / "commits").mkdir()
    for flag in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa"):
        settings = {**SETTINGS, "spark.driver.extraJavaOptions": f"-Da=b {flag}"}
        assert jc.sharing_options(str(tmp_path), settings) == ("", None)


def test_sharing_flags_in_spark_submit_opts_turn_it_off(tmp_path, monkeypatch):
    """Two archives in one JVM's options would keep it from starting: SPARK_SUBMIT_OPTS is the user's say too."""
    (tmp_path / "commits").mkdir()
    assert jc.sharing_options(str(tmp_path), SETTINGS)[0].startswith("-XX:ArchiveClassesAtExit=")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:+UseSerialGC -XX:SharedArchiveFile=/x.jsa -Xshare:auto")
    assert jc.sharing_options(str(tmp_path), SETTINGS) == ("", None)
