"""`icerouter pack`: the job's Python environment as one archive for `spark-submit --archives`.

On a cluster the job's Python code runs in the executors' Python workers (Kafka reads, decoding,
Parquet writes, table commits), which need icerouter and its dependencies. The archive is a
virtual environment (bin/python, lib/pythonX.Y/site-packages, pyvenv.cfg, as `python -m venv
--without-pip` lays it out) that Spark unpacks in every executor's working directory
(`--archives icerouter-env.tar.gz#environment`); `spark.pyspark.python=./environment/bin/python`
makes the Python workers run it.

It is built without network and without pip, from what is installed here (distributions.py):
each distribution's files as its RECORD lists them (dist-info and compiled .pyc included: the
executors do not recompile them), plus icerouter's own packages. Those files are written from
site-packages straight into the archive instead of first being copied into a staging
site-packages (~800 MB written once less); only the small venv skeleton and, for an editable
install, icerouter's packages (source tree without __pycache__, compiled here, a minimal
dist-info) are staged.

What the archive assumes about the nodes (docs/deployment.md, "The environment archive"): like
venv-pack's archives (jcrist/venv-pack#24) it does not carry an interpreter. bin/python is a
symlink to this machine's interpreter (its real path), and pyvenv.cfg points at its directory:
every node needs the same Python (same major.minor, at the same path, with its standard
library) and, for the compiled wheels (pyarrow, polars, confluent-kafka...), the same OS, CPU
architecture and a glibc at least as new. `describe_nodes()` says it in one line.
"""

from __future__ import annotations

import base64
import compileall
import gzip
import hashlib
import os
import platform
import shutil
import sys
import sysconfig
import tarfile
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from router.deploy.defaults import COMPRESS_LEVEL, DEFAULT_OUTPUT
from router.deploy.distributions import ROOT_DISTRIBUTION, Environment, PackError, resolve

#: the name the archive is unpacked under on the executors (`--archives <file>#environment`)
ENV_NAME = "environment"
EXECUTOR_PYTHON = f"./{ENV_NAME}/bin/python"
#: at the archive's root: what `spark-submit` runs as the driver (it wants a .py file)
ENTRY_SCRIPT = "icerouter_main.py"
ENTRY_SOURCE = '''"""spark-submit's entry to icerouter: spark-submit [options] environment/icerouter_main.py run --config FILE

The same as the `icerouter` command: the arguments after this file's name are its arguments.
"""

import sys

from router.cli import main

if __name__ == "__main__":
    sys.exit(main())
'''
PROGRESS_EVERY_SECONDS = 5.0


@dataclass(frozen=True)
class PackResult:
    """What was written and how to hand it to Spark."""

    path: str
    archive_bytes: int
    content_bytes: int
    files: int
    distributions: tuple[str, ...]
    python: str
    seconds: float

    def spark_settings(self) -> dict[str, str]:
        """`job.spark` / `--conf` settings that make the executors' Python workers run the archive."""
        return {"spark.archives": f"{self.path}#{ENV_NAME}", "spark.pyspark.python": EXECUTOR_PYTHON}

    def instructions(self) -> str:
        """How to use the archive: spark-submit options, job.spark settings, the driver, the nodes."""
        conf = self.spark_settings()
        return "\n".join([
            f"wrote {self.path} ({self.archive_bytes / 1e6:.0f} MB; {len(self.distributions)} distributions, "
            f"{self.files} files)",
            "spark-submit:",
            f"  --archives {conf['spark.archives']} --conf spark.pyspark.python={EXECUTOR_PYTHON}",
            f"  --conf spark.pyspark.driver.python={EXECUTOR_PYTHON} {ENV_NAME}/{ENTRY_SCRIPT} run --config FILE",
            "or `icerouter run` with job.spark:",
            f"  spark.archives: {conf['spark.archives']}",
            f"  spark.pyspark.python: {EXECUTOR_PYTHON}",
            f"the driver runs the Kafka source's planning in that Python too: unpack the archive into ./{ENV_NAME} "
            "where it starts:",
            f"  mkdir -p {ENV_NAME} && tar -xzf {self.path} -C {ENV_NAME}",
            f"every node needs {describe_nodes(self.python)}",
        ])


def describe_nodes(python: str | None = None) -> str:
    """What every node running the archive needs, in one line."""
    python = python or base_python()
    libc = "-".join(platform.libc_ver()) or "libc"
    return (f"Python {sys.version_info.major}.{sys.version_info.minor} at {python} (this machine's "
            f"{platform.python_version()}), on {sys.platform} {platform.machine()} with {libc} or newer")


def base_python() -> str:
    """The interpreter the archive's bin/python points to: this one, outside any virtual environment."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def site_packages_dir() -> str:
    """site-packages inside the archive, as venv lays it out (lib/pythonX.Y/site-packages on POSIX)."""
    return Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": "", "platbase": ""})).as_posix().lstrip("/")


def pack(output: str = DEFAULT_OUTPUT, include_spark: bool = False, compress_level: int = COMPRESS_LEVEL,
         progress: Callable[[str], None] | None = None) -> PackResult:
    """Write the archive to `output` (replaced atomically); `progress` gets a line per step."""
    say = progress or (lambda line: None)
    started = time.monotonic()
    output = os.path.abspath(output)
    parent = os.path.dirname(output)
    if not os.path.isdir(parent):
        raise PackError(f"cannot write {output}: directory {parent} does not exist")
    if os.path.isdir(output):
        raise PackError(f"cannot write {output}: it is a directory")
    env = resolve(include_spark=include_spark)
    source = "installed" if env.own.installed is not None else f"source tree {env.own.packages[0].parent}"
    say(f"pack: {len(env.distributions)} distributions for {ROOT_DISTRIBUTION} {env.own.version} ({source})"
        + (f"; left out: {', '.join(env.excluded)} (the cluster's Spark provides them)" if env.excluded else ""))
    with tempfile.TemporaryDirectory(prefix="icerouter-pack-") as staging:
        entries = _skeleton(Path(staging))
        if env.own.installed is None:
            entries += _own_packages(env, Path(staging))
        entries += _distribution_files(env)
        total = sum(os.lstat(src).st_size for _, src in entries)
        say(f"pack: {len(entries)} files, {total / 1e6:.0f} MB; writing {output}")
        _write(output, entries, total, compress_level, say)
    size = os.path.getsize(output)
    result = PackResult(output, size, total, len(entries), tuple(env.names()), base_python(),
                        time.monotonic() - started)
    say(f"pack: wrote {output}: {size / 1e6:.0f} MB in {result.seconds:.0f} s")
    return result


def _skeleton(staging: Path) -> list[tuple[str, str]]:
    """A venv without pip (its own creation, so the layout is the interpreter's), bin/python pointing
    at the base interpreter's real path, pyvenv.cfg without the staging path, no activate scripts."""

    class Builder(venv.EnvBuilder):
        def setup_scripts(self, context):  # activate scripts hard-code the staging path; Spark needs none
            pass

    root = staging / ENV_NAME
    Builder(with_pip=False, symlinks=True, clear=True).create(root)
    python = base_python()
    bin_dir = root / "bin"
    for link in bin_dir.iterdir():
        if link.is_symlink() and os.path.isabs(os.readlink(link)):
            link.unlink()
            link.symlink_to(python)
    (root / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n"
        f"version = {platform.python_version()}\nexecutable = {python}\n")
    (root / ENTRY_SCRIPT).write_text(ENTRY_SOURCE)
    return [(path.relative_to(root).as_posix(), str(path)) for path in _tree(root)]


def _tree(root: Path) -> list[Path]:
    """Every directory, file and symlink below `root` (a symlinked directory such as lib64 -> lib
    as the link itself)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        found += [Path(dirpath) / name for name in dirnames + filenames]
    return found


def _own_packages(env: Environment, staging: Path) -> list[tuple[str, str]]:
    """router/, registry/, evolution/ from the source tree (no __pycache__, compiled here for this
    interpreter) and a dist-info that names icerouter, its version and requirements."""
    site = site_packages_dir()
    out = staging / "own"
    for package in env.own.packages:
        shutil.copytree(package, out / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    compileall.compile_dir(out, quiet=1, workers=1)
    info = out / f"{ROOT_DISTRIBUTION}-{env.own.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" f"Name: {ROOT_DISTRIBUTION}\nVersion: {env.own.version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in env.own.requires))
    (info / "INSTALLER").write_text("icerouter-pack\n")
    (info / "top_level.txt").write_text("".join(f"{p.name}\n" for p in env.own.packages))
    files = [p for p in sorted(out.rglob("*")) if p.is_file()]
    record = [f"{p.relative_to(out).as_posix()},sha256={_digest(p)},{p.stat().st_size}" for p in files]
    (info / "RECORD").write_text("\n".join(record + [f"{info.name}/RECORD,,"]) + "\n")
    return [(f"{site}/{p.relative_to(out).as_posix()}", str(p)) for p in _tree(out)]


def _digest(path: Path) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def _distribution_files(env: Environment) -> list[tuple[str, str]]:
    """Each distribution's RECORD files below its site-packages (console scripts in ../bin are left
    out: their #! line names this machine's interpreter, and Spark runs none of them)."""
    site = site_packages_dir()
    entries: dict[str, str] = {}
    for _, dist in sorted(env.distributions.items()):
        if not dist.files:
            raise PackError(f"{dist.metadata['Name']} {dist.version} lists no files (no RECORD): reinstall it with pip")
        for rel in dist.files:
            if ".." in rel.parts:
                continue
            path = Path(dist.locate_file(rel))
            if not os.path.lexists(path):
                if rel.suffix == ".pyc":
                    continue  # a compiled file pip recorded and something removed: rebuilt on import
                raise PackError(f"{dist.metadata['Name']} {dist.version} is installed incompletely: {path} is "
                                "missing (reinstall it)")
            entries.setdefault(f"{site}/{rel.as_posix()}", str(path))
    return sorted(entries.items())


def _write(output: str, entries: list[tuple[str, str]], total: int, level: int,
           say: Callable[[str], None]) -> None:
    """A gzip'd tar, entries sorted, owners and the gzip time zeroed (same files -> same archive);
    file times kept, so the .pyc files stay valid. Written beside `output`, then renamed over it."""
    partial = f"{output}.partial-{os.getpid()}"
    written, last = 0, time.monotonic()
    try:
        with open(partial, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for arcname, source in sorted(entries):
                info = tar.gettarinfo(source, arcname)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    with open(source, "rb") as handle:
                        tar.addfile(info, handle)
                    written += info.size
                else:
                    tar.addfile(info)
                if time.monotonic() - last >= PROGRESS_EVERY_SECONDS:
                    last = time.monotonic()
                    say(f"pack: {written / 1e6:.0f} of {total / 1e6:.0f} MB written")
        os.replace(partial, output)
    except OSError as exc:
        raise PackError(f"cannot write {output}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(partial):
            os.remove(partial)
