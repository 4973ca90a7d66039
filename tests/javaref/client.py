"""The test side of the Java reference reader: starts one JVM and asks it for many tables."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path

from tests.javaref.environment import Reference
from tests.javaref.reader_main import canonical, canonical_rows

__all__ = ["JavaReader", "JavaReaderError", "assert_readers_agree", "canonical", "rows_of"]

READER = str(Path(__file__).with_name("reader_main.py"))


class JavaReaderError(RuntimeError):
    pass


class JavaReader:
    """One Spark 3.5 + Iceberg 1.10 JVM serving reads over JSON lines (tests/javaref/reader_main.py)."""

    def __init__(self, ref: Reference, warehouse: str, log_path: str, start_timeout: float = 300,
                 classpath_first: tuple[str, ...] = ()) -> None:
        self.warehouse, self.log_path = warehouse, log_path
        os.makedirs(warehouse, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_HOME", "PYTHONPATH"))}
        env.update(TZ="UTC", SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=ref.python)
        if classpath_first:  # jars ahead of Spark's own on the driver (a newer library a reader needs)
            env["PYSPARK_SUBMIT_ARGS"] = f"--driver-class-path {os.pathsep.join(classpath_first)} pyspark-shell"
        self._log = open(log_path, "w")
        args = [ref.python, READER, "--warehouse", warehouse]
        for jar in ref.jars:
            args += ["--jar", jar]
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                      text=True, env=env, cwd=warehouse)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.version = self._next(start_timeout)["ready"]

    def _pump(self) -> None:
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise JavaReaderError(f"no answer in {timeout:.0f} s; log: {self._tail()}") from None
        if line is None:
            raise JavaReaderError(f"the reader exited ({self._proc.poll()}); log: {self._tail()}")
        return json.loads(line)

    def _tail(self) -> str:
        self._log.flush()
        return Path(self.log_path).read_text()[-3000:]

    def _ask(self, request: dict, timeout: float = 180) -> dict:
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        answer = self._next(timeout)
        if "error" in answer:
            raise JavaReaderError(answer["error"])
        return answer

    def read_metadata(self, metadata: str, columns: list[str] | None = None) -> list[dict]:
        """The rows of the table whose metadata file this is (already canonical); `columns`: only
        those, metadata columns such as ``_row_id`` included."""
        request = {"op": "read", "metadata": metadata}
        if columns:
            request["columns"] = list(columns)
        return self._ask(request)["rows"]

    def read_generic(self, table) -> list[dict]:
        """A pyiceberg Table's current snapshot, read by Java Iceberg's generic reader (variants as JSON values)."""
        return self._ask({"op": "generic", "metadata": table.metadata_location.removeprefix("file://")})["rows"]

    def read(self, table, columns: list[str] | None = None) -> list[dict]:
        """A pyiceberg Table's current snapshot, read by Java Iceberg from its metadata file."""
        location = table.metadata_location
        return self.read_metadata(location[len("file://"):] if location.startswith("file://") else location,
                                  columns)

    def sql(self, *statements: str) -> list[dict]:
        """Run statements (catalog ``javaref``: a Hadoop catalog on the warehouse); the last one's rows."""
        return self._ask({"op": "sql", "statements": list(statements)})["rows"]

    def warehouse_path(self, namespace: str, table: str) -> Path:
        """Where the Hadoop catalog ``javaref`` keeps a table."""
        return Path(self.warehouse) / namespace / table

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()


def rows_of(rows) -> list[str]:
    """Any reader's rows (dicts, or an Arrow table) as sorted canonical JSON lines."""
    if hasattr(rows, "to_pylist"):
        rows = rows.to_pylist()
    return canonical_rows(rows)


def _empty_lists_as_null(value):
    if isinstance(value, list):
        return [_empty_lists_as_null(v) for v in value] or None
    if isinstance(value, dict):
        return {k: _empty_lists_as_null(v) for k, v in value.items()}
    return value


def _loosely(rows: list[str]) -> list[str]:
    return sorted(json.dumps(_empty_lists_as_null(json.loads(r)), sort_keys=True) for r in rows)


def _differences(a: list[str], b: list[str]) -> str:
    return f"{len(a)} rows against {len(b)}; first differences: {sorted(set(a) ^ set(b))[:4]}"


def assert_readers_agree(java: JavaReader, table) -> list[str]:
    """Java Iceberg, DuckDB and pyiceberg read the table's current snapshot row for row; returns the rows.

    Java and DuckDB must agree exactly. pyiceberg 0.12 reads a null list of structs as an empty list
    (a null list of primitives stays null), so it is compared with empty and null lists taken alike."""
    from tests.duckdb_reader import read_iceberg

    table = table.refresh()
    duck = rows_of(read_iceberg(table))
    got = rows_of(java.read(table))
    assert got == duck, f"Java Iceberg and DuckDB disagree: {_differences(got, duck)}"
    scanned = rows_of(table.scan().to_arrow())
    assert _loosely(scanned) == _loosely(duck), f"pyiceberg and DuckDB disagree: {_differences(scanned, duck)}"
    return got
