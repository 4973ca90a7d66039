"""A Spark standalone cluster on 127.0.0.1: one master and N workers from the pyspark wheel.

The daemons are Spark's own launcher classes (``org.apache.spark.deploy.master.Master``
and ``org.apache.spark.deploy.worker.Worker``) started through the wheel's
``bin/spark-class``, so the JVM options Spark needs on Java 17 are the ones
Spark computes. Executors run in their own JVMs under the workers, with Python
workers of their own: a job submitted here (``spark.master=spark://...``) shares
no process, cache or local file with its driver except through what Spark ships
and the storage both can reach.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from router.devstack._proc import (
    Service, die_with_parent, end_process, free_port, log_tail, port_open, remove_tree, wait_until,
)
from router.devstack.exceptions import ServiceMissingError, ServiceStartError

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> str:
    """The pyspark package directory: it holds ``jars/`` and ``bin/spark-class``."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    if not os.path.isfile(os.path.join(home, "bin", "spark-class")):
        raise ServiceMissingError("spark", f"bin/spark-class not found under {home}")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        raise ServiceMissingError("spark", "no java on PATH and JAVA_HOME unset (apt-get install openjdk-17-jre-headless)")
    return home


def _source_root() -> str:
    return str(Path(__file__).resolve().parents[2])


class LocalSparkCluster(Service):
    """Master + ``workers`` workers (``cores`` and ``memory`` each), all on 127.0.0.1 with free ports."""

    def __init__(self, workdir: str | None = None, workers: int = 2, cores: int = 1, memory: str = "1g",
                 start_timeout: float = 90.0, tied_to_parent: bool = False, share_source: bool = True) -> None:
        """`share_source`: executors import this source tree (PYTHONPATH); False leaves them only what a
        job ships (`icerouter pack`'s archive), as on a real cluster, and no PYTHONPATH at all."""
        self._own_dir = workdir is None
        self.share_source = share_source
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="icerouter-spark-"))
        self.workers, self.cores, self.memory = workers, cores, memory
        self.start_timeout = start_timeout
        self.tied_to_parent = tied_to_parent
        self.port = self.webui_port = 0
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _env(self) -> dict:
        """Daemons (and so executors and their Python workers) import this source tree, if shared."""
        env = dict(os.environ)
        env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP=HOST, SPARK_LOG_DIR=os.path.join(self.workdir, "logs"),
                   SPARK_NO_DAEMONIZE="1", PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON") or sys.executable,
                   SPARK_WORKER_DIR=os.path.join(self.workdir, "work"))
        if self.share_source:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (_source_root(), env.get("PYTHONPATH")) if p)
        else:
            env.pop("PYTHONPATH", None)
        return env

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        log_path = os.path.join(self.workdir, f"{name}.log")
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.workdir, env=self._env(),
                                    preexec_fn=die_with_parent() if self.tied_to_parent else None)
        self.procs.append(proc)
        return proc

    def start(self) -> str:
        """Start the master, then the workers; return once every worker has registered."""
        if self.procs:
            return self.master_url
        os.makedirs(os.path.join(self.workdir, "work"), exist_ok=True)
        try:
            self._start_master()
            for i in range(self.workers):
                self._launch(f"worker-{i}", [WORKER_CLASS, "--host", HOST, "--port", "0",
                                             "--webui-port", str(free_port(HOST)), "--cores", str(self.cores),
                                             "--memory", self.memory, "--work-dir",
                                             os.path.join(self.workdir, "work", str(i)), self.master_url])
            wait_until(lambda: self.alive_workers() >= self.workers, timeout=self.start_timeout,
                       service="spark", log_path=os.path.join(self.workdir, f"worker-{self.workers - 1}.log"),
                       interval=0.5)
        except BaseException:
            self.stop(remove_data=False)
            raise
        return self.master_url

    def _start_master(self) -> None:
        for attempt in range(3):
            self.port, self.webui_port = free_port(HOST), free_port(HOST)
            proc = self._launch("master", [MASTER_CLASS, "--host", HOST, "--port", str(self.port),
                                           "--webui-port", str(self.webui_port)])
            try:
                wait_until(lambda: port_open(HOST, self.port) and self._state() is not None,
                           timeout=self.start_timeout, service="spark", proc=proc,
                           log_path=os.path.join(self.workdir, "master.log"), interval=0.3)
                return
            except ServiceStartError:
                end_process(proc)
                self.procs.remove(proc)
                if attempt == 2 or "bind" not in log_tail(os.path.join(self.workdir, "master.log")).lower():
                    raise

    def _state(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.webui_port}/json/", timeout=2) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self._state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> list[dict]:
        """Running and completed applications as the master reports them."""
        state = self._state() or {}
        return list(state.get("activeapps", [])) + list(state.get("completedapps", []))

    def spark_settings(self, executor_memory: str = "768m") -> dict:
        """``job.spark`` settings that submit a job to this cluster with every worker used."""
        settings = {"spark.master": self.master_url, "spark.driver.host": HOST, "spark.driver.bindAddress": HOST,
                    "spark.executor.memory": executor_memory, "spark.executor.cores": str(self.cores),
                    "spark.cores.max": str(self.cores * self.workers)}
        if self.share_source:
            settings["spark.executorEnv.PYTHONPATH"] = self._env()["PYTHONPATH"]
        return settings

    def stop(self, remove_data: bool | None = None) -> None:
        """Workers first (they kill their executors), then the master; drop a temporary workdir."""
        for proc in reversed(self.procs):
            end_process(proc, timeout=15)
        self.procs.clear()
        remove_tree(self.workdir, remove_data, self._own_dir)
