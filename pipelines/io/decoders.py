"""Processes that decode for the driver: a pool of ``python -m msglake.pipelines.io.decoders``.

Retry marking decodes each micro-batch in the driver before Spark writes it
(``source.DriverReader``). A task of many small segments is mostly Python steps (about 0.2 ms a
segment, Python's lock held), which threads run one at a time, so a large batch's tasks go to
these processes, a core each. They are started once per driver process (about a second: Python,
pyarrow, msglake) and kept. Not ``multiprocessing``: its spawned children import the caller's
main script again, which breaks a script that does not guard its top level, and a fork would copy
the driver's JVM-gateway threads half-way.

A task and its result cross a pipe pickled: a module-level function and its arguments, and what
it returns (an exception raised in the process is raised again in the driver).

A second pool, :func:`idle_pool`, runs at the kernel's idle priority (``SCHED_IDLE``): it decodes
the next micro-batch of a backlog ahead while Spark writes the current one
(``source.DriverReader``), on the cores Spark's tasks leave idle (it takes no core they want; they
still share the caches and the memory's bandwidth).
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from queue import Empty, SimpleQueue


class Cancelled(Exception):
    """A :meth:`DecoderPool.map` stopped by its ``cancel`` event before every task ran."""


class DecoderPool:
    """``size`` decoding processes; :meth:`map` runs a function over arguments on them. ``idle``:
    the processes run only on cores nothing else wants (see :func:`idle_pool`)."""

    def __init__(self, size: int, idle: bool = False):
        self._lock = threading.Lock()
        self._procs = [subprocess.Popen([sys.executable, "-m", __name__, *(["--idle"] if idle else [])],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(max(size, 1))]

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def map(self, fn: Callable, args: Sequence[tuple], cancel: threading.Event | None = None,
            each_done: Callable[[int, object], None] | None = None) -> list:
        """``[fn(*a) for a in args]``, each call in one of the processes, in the order given.
        ``each_done(i, result)`` is called as each call returns. Raises :class:`Cancelled` when
        ``cancel`` is set before the last task was handed out (the tasks already running finish
        first)."""
        todo: SimpleQueue = SimpleQueue()
        for i, a in enumerate(args):
            todo.put((i, a))
        results: list = [None] * len(args)
        done: set[int] = set()
        failures: list[BaseException] = []

        def feed(proc: subprocess.Popen) -> None:
            while not failures and not (cancel is not None and cancel.is_set()):
                try:
                    i, a = todo.get_nowait()
                except Empty:
                    return
                try:
                    pickle.dump((fn, a), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                    proc.stdin.flush()
                    ok, value = pickle.load(proc.stdout)
                except BaseException as e:  # noqa: BLE001 -- any of it leaves the pipe out of step
                    # A task or answer that did not cross whole (the process died, or one side
                    # could not pickle) leaves its pipes out of step: the process goes, and the
                    # pool starts another for the next call.
                    proc.kill()
                    proc.wait()
                    failures.append(RuntimeError(f"the driver's decoding process failed a task ({e!r}); "
                                                 "it is started again for the next batch"))
                    return
                if not ok:
                    failures.append(value)
                    return
                results[i] = value
                done.add(i)
                if each_done is not None:
                    each_done(i, value)

        with self._lock:  # one map at a time: each process answers one task at a time
            feeders = [threading.Thread(target=feed, args=(p,), daemon=True) for p in self._procs]
            for t in feeders:
                t.start()
            for t in feeders:
                t.join()
        if failures:
            raise failures[0]
        if len(done) != len(args) and cancel is not None and cancel.is_set():
            raise Cancelled()
        if len(done) != len(args):  # cannot happen: each task is answered or fails
            raise RuntimeError(f"the driver's decoding processes answered {len(done)} of {len(args)} tasks")
        return results

    def alive(self) -> bool:
        return all(p.poll() is None for p in self._procs)

    def kill(self) -> None:
        """Stop the processes now (one died: the pool is replaced; a map still running on the
        others fails, as its tasks would have)."""
        for p in self._procs:
            p.kill()

    def close(self) -> None:
        for p in self._procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self._procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


_pools: dict[bool, DecoderPool] = {}
#: One lock per pool: the idle pool's processes may wait long for a core, and starting or
#: replacing them must never hold up the pool a batch waits on.
_pool_locks = {False: threading.Lock(), True: threading.Lock()}


def _started(idle: bool) -> DecoderPool:
    with _pool_locks[idle]:
        running = _pools.get(idle)
        if running is not None and not running.alive():
            running.kill()
            running = None
        if running is None:
            running = _pools[idle] = DecoderPool(os.cpu_count() or 1, idle=idle)
            atexit.register(running.close)
        return running


def pool() -> DecoderPool:
    """The driver process's pool (a process per core), started on first use, again if one of its
    processes died."""
    return _started(False)


def idle_pool() -> DecoderPool:
    """The driver process's pool of processes at idle priority (Linux ``SCHED_IDLE``; elsewhere
    the lowest ``nice``), started on first use like :func:`pool`. Its work waits while Spark's
    tasks (or anything else) want the cores: reading ahead takes what the write it overlaps leaves."""
    return _started(True)


def _lower_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def _serve() -> None:
    """A process of the pool: answer tasks from stdin on stdout until stdin closes."""
    if "--idle" in sys.argv[1:]:
        _lower_priority()
    # Ctrl-C in the terminal reaches the whole process group: the driver stops its query
    # gracefully, and the batch it finishes still needs these processes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tasks, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to stderr, not into the answers
    # What the driver's tasks call, imported while the driver is still starting its query.
    import msglake.pipelines.io.sinks  # noqa: F401
    import msglake.pipelines.io.source  # noqa: F401
    while True:
        try:
            fn, args = pickle.load(tasks)
        except EOFError:
            return
        try:
            answer = (True, fn(*args))
        except Exception as e:  # noqa: BLE001 -- raised again in the driver
            answer = (False, e)
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    _serve()
