"""Iceberg catalogs for local runs and tests: SQLite file, or a private PostgreSQL.

PostgreSQL refuses to run as root, so when started by root the cluster is
initialised and run as an unprivileged user (``postgres`` if it exists, else
``nobody``) that owns the cluster directory. The server listens on 127.0.0.1
only, with ``trust`` auth, and its socket in the cluster directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

from router.devstack._proc import Service, die_with_parent, end_process, free_port, log_tail, remove_tree, wait_until
from router.devstack.exceptions import ServiceMissingError, ServiceStartError

HOST = "127.0.0.1"
SUPERUSER = "postgres"

#: Settings for a throwaway dev/test cluster: durability traded for speed.
DEV_SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # each process keeps a connection pool per catalog it opened (the job's Python workers, the
    # driver's commit threads, a test process's many catalogs): a full test run reached 100
    "max_connections": "200",
    "shared_buffers": "64MB",
}


def sqlite_catalog_properties(workdir: str, name: str = "catalog.db") -> dict:
    """pyiceberg SqlCatalog properties for a SQLite file and warehouse under ``workdir``."""
    workdir = os.path.abspath(workdir)
    warehouse = os.path.join(workdir, "warehouse")
    os.makedirs(warehouse, exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{os.path.join(workdir, name)}", "warehouse": f"file://{warehouse}"}


def postgres_catalog_properties(uri: str, warehouse_dir: str) -> dict:
    """pyiceberg SqlCatalog properties for a PostgreSQL URI and a local warehouse."""
    warehouse_dir = os.path.abspath(warehouse_dir)
    os.makedirs(warehouse_dir, exist_ok=True)
    return {"type": "sql", "uri": uri, "warehouse": f"file://{warehouse_dir}"}


def find_postgres_bindir() -> str:
    """Directory holding ``initdb`` and ``postgres`` (pg_config first, newest Debian version next)."""
    candidates: list[str] = []
    if shutil.which("pg_config"):
        try:
            out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10)
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0, reverse=True)
    for bindir in candidates:
        if bindir and all(os.access(os.path.join(bindir, b), os.X_OK) for b in ("initdb", "postgres")):
            return bindir
    raise ServiceMissingError("postgres", "PostgreSQL server binaries not found (apt-get install postgresql)")


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged account to run postgres as, or None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServiceMissingError("postgres", "running as root and no unprivileged user (postgres/nobody) exists")


class LocalPostgres(Service):
    """A private PostgreSQL cluster on 127.0.0.1 with a free port, for catalogs."""

    def __init__(self, workdir: str | None = None, database: str = "icerouter", port: int = 0,
                 start_timeout: float = 60.0, tied_to_parent: bool = False) -> None:
        """``tied_to_parent``: the server gets a fast shutdown if this process dies."""
        self._own_dir = workdir is None
        self.tied_to_parent = tied_to_parent
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="icerouter-pg-"))
        self.database = database
        self.port = port
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.data_dir = os.path.join(self.workdir, "pgdata")
        self.log_path = os.path.join(self.workdir, "postgres.log")

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://{SUPERUSER}@{HOST}:{self.port}/{self.database}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _popen_user(self) -> dict:
        user = _run_as()
        if user is None:
            return {}
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def _chown(self) -> None:
        user = _run_as()
        if user is None:
            return
        for root, dirs, files in os.walk(self.workdir):
            for entry in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                os.chown(entry, user.pw_uid, user.pw_gid)

    def _check_reachable(self) -> None:
        """The unprivileged user must be able to traverse every parent of the workdir."""
        user = _run_as()
        if user is None:
            return
        path = os.path.dirname(self.workdir)
        while True:
            st = os.stat(path)
            if not (st.st_mode & 0o001 or (st.st_uid == user.pw_uid and st.st_mode & 0o100)
                    or (st.st_gid == user.pw_gid and st.st_mode & 0o010)):
                raise ServiceStartError("postgres", f"user {user.pw_name!r} cannot enter {path}; "
                                        "put the cluster under a world-traversable directory (e.g. /tmp)")
            parent = os.path.dirname(path)
            if parent == path:
                return
            path = parent

    def start(self) -> str:
        """initdb (first time), start the server, create the database; return its SQLAlchemy URI."""
        if self.proc is not None:
            return self.uri
        bindir = find_postgres_bindir()
        os.makedirs(self.workdir, exist_ok=True)
        self._check_reachable()
        self._chown()
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        if not os.path.exists(os.path.join(self.data_dir, "PG_VERSION")):
            res = subprocess.run([os.path.join(bindir, "initdb"), "-D", self.data_dir, "-U", SUPERUSER,
                                  "--auth=trust", "--encoding=UTF8", "--no-sync"],
                                 capture_output=True, text=True, env=env, cwd=self.workdir, **self._popen_user())
            if res.returncode != 0:
                raise ServiceStartError("postgres", f"initdb failed: {res.stderr.strip()[-2000:]}")
        for attempt in range(3):
            self.port = self.port or free_port(HOST)
            cmd = [os.path.join(bindir, "postgres"), "-D", self.data_dir, "-p", str(self.port),
                   "-h", HOST, "-k", self.workdir]
            for key, value in DEV_SERVER_SETTINGS.items():
                cmd += ["-c", f"{key}={value}"]
            log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env,
                                             cwd=self.workdir, start_new_session=True, **self._popen_user(),
                                             preexec_fn=die_with_parent(signal.SIGINT) if self.tied_to_parent else None)
            finally:
                os.close(log)
            try:
                wait_until(self._ready, timeout=self.start_timeout, service="postgres", proc=self.proc,
                           log_path=self.log_path, interval=0.1)
                break
            except ServiceStartError:
                self._kill()
                if attempt == 2 or "address already in use" not in log_tail(self.log_path).lower():
                    raise
                self.port = 0
        self._create_database()
        return self.uri

    def _connect(self, dbname: str):
        import psycopg2

        return psycopg2.connect(host=HOST, port=self.port, user=SUPERUSER, dbname=dbname, connect_timeout=2)

    def _ready(self) -> bool:
        self._connect("postgres").close()
        return True

    def _create_database(self) -> None:
        conn = self._connect("postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{self.database}"')
        finally:
            conn.close()

    def _kill(self) -> None:
        if self.proc is not None:
            end_process(self.proc, sig=signal.SIGINT, timeout=15)  # PostgreSQL's "fast shutdown"
            self.proc = None

    def stop(self, remove_data: bool | None = None) -> None:
        """Fast shutdown (then kill); drop a temporary cluster directory."""
        self._kill()
        remove_tree(self.workdir, remove_data, self._own_dir)

    def __repr__(self) -> str:
        return f"LocalPostgres(uri={self.uri!r}, pid={self.pid}, workdir={self.workdir!r})"
