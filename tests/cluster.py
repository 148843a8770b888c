"""A Spark standalone cluster on loopback, started from the installed pyspark (tests, benchmarks, trials).

::

    with standalone(work_dir, workers=2) as cluster:
        subprocess.run(["msglake", "ingest", "--master", cluster.master_url])

One master and ``workers`` workers, each a ``spark-class`` process in a session of its own,
bound to 127.0.0.1. Every port is 0, chosen by the JVM that binds it, and the master's are read
back from its log: a port picked here and handed over would be free only until the JVM gets to
bind it, and other tests' JVMs (xdist runs two test processes) start in that gap.

Stopping signals each process group it started (the executors a worker launched are in its
group), then waits, then kills what is left: nothing outlives the block.
If the starting process is killed before it can stop them, they get SIGTERM from the kernel.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    master_url: str
    web_url: str
    work_dir: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def status(self) -> dict:
        """The master's JSON status (workers, running and completed applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as r:
            return json.load(r)

    def stop(self, grace: float = 20.0) -> None:
        """Stop every process group this cluster started: SIGTERM, then SIGKILL after ``grace`` s."""
        for p in reversed(self.processes):  # workers (and their executors) before the master
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.processes:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        for p in self.processes:
            _signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        while self.alive_groups() and time.monotonic() < deadline:
            time.sleep(0.1)  # killed members are reaped by init shortly after

    def alive_groups(self) -> list[int]:
        """Process groups of this cluster that still have a member."""
        alive = []
        for p in self.processes:
            try:
                os.killpg(p.pid, 0)
                alive.append(p.pid)
            except ProcessLookupError:
                pass
        return alive


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the process that started it dies (Linux), so a
    killed test or benchmark leaves no cluster behind even when its cleanup code never runs."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _master_ports(log: Path, offset: int, master: subprocess.Popen, deadline: float) -> tuple[int, int]:
    """The RPC and web UI ports the master bound, from the lines it logged after ``offset``."""
    while True:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        rpc = re.search(r"Starting Spark master at spark://[^:\s]+:(\d+)", text)
        web = re.search(r"Successfully started service 'MasterUI' on port (\d+)", text)
        if rpc and web:
            return int(rpc.group(1)), int(web.group(1))
        if master.poll() is not None or time.monotonic() > deadline:
            why = "exited" if master.poll() is not None else "timeout: its log has no INFO lines of the bound ports"
            raise RuntimeError(f"the standalone master did not start ({why}); log: {log}")
        time.sleep(0.2)


def start_standalone(work_dir: str | os.PathLike, workers: int = 2, cores: int = 1, memory: str = "2g",
                     timeout: float = 120.0) -> StandaloneCluster:
    """Start a master and ``workers`` workers on 127.0.0.1; returns once every worker has registered."""
    work = Path(work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    home = spark_home()
    # The master's REST submission server would take the fixed port 6066: nothing here submits
    # through it. Spark's own log configuration: the ports are read from INFO lines.
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
           "SPARK_LOG_DIR": str(work / "logs"), "SPARK_WORKER_DIR": str(work / "worker"),
           "SPARK_MASTER_OPTS": f"{os.environ.get('SPARK_MASTER_OPTS', '')} -Dspark.master.rest.enabled=false".strip()}
    env.pop("SPARK_CONF_DIR", None)
    cluster = StandaloneCluster("", "", work)
    spark_class = str(home / "bin" / "spark-class")

    def launch(name: str, *args: str) -> tuple[Path, int]:
        path = work / f"{name}.log"
        log = open(path, "ab")
        offset = log.tell()
        cluster.processes.append(
            subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
        )
        log.close()
        return path, offset

    deadline = time.monotonic() + timeout
    try:
        log, offset = launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", "0", "--webui-port", "0")
        port, web = _master_ports(log, offset, cluster.processes[0], deadline)
        cluster.master_url, cluster.web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}"
        for i in range(workers):
            launch(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                   "--cores", str(cores), "--memory", memory, "--webui-port", "0",
                   "--work-dir", str(work / f"worker-{i}"), cluster.master_url)
        while True:
            try:
                if cluster.status().get("aliveworkers", 0) >= workers:
                    return cluster
            except OSError:
                pass  # the master's web UI is not serving yet
            dead = [p.args[1] for p in cluster.processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = "exited: " + ", ".join(dead) if dead else "timeout"
                raise RuntimeError(f"standalone cluster did not come up ({why}); logs in {work}")
            time.sleep(0.5)
    except BaseException:
        cluster.stop(grace=5)
        raise


@contextmanager
def standalone(work_dir: str | os.PathLike, **kw):
    """:func:`start_standalone` as a context manager that always stops the cluster."""
    cluster = start_standalone(work_dir, **kw)
    try:
        yield cluster
    finally:
        cluster.stop()
