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
"""
from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from queue import Empty, SimpleQueue


class DecoderPool:
    """``size`` decoding processes; :meth:`map` runs a function over arguments on them."""

    def __init__(self, size: int):
        self._lock = threading.Lock()
        self._procs = [subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE) for _ in range(max(size, 1))]

    def map(self, fn: Callable, args: Sequence[tuple]) -> list:
        """``[fn(*a) for a in args]``, each call in one of the processes, in the order given."""
        todo: SimpleQueue = SimpleQueue()
        for i, a in enumerate(args):
            todo.put((i, a))
        results: list = [None] * len(args)
        done: set[int] = set()
        failures: list[BaseException] = []

        def feed(proc: subprocess.Popen) -> None:
            while not failures:
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

        with self._lock:  # one map at a time: each process answers one task at a time
            feeders = [threading.Thread(target=feed, args=(p,), daemon=True) for p in self._procs]
            for t in feeders:
                t.start()
            for t in feeders:
                t.join()
        if failures:
            raise failures[0]
        if len(done) != len(args):  # cannot happen: each task is answered or fails
            raise RuntimeError(f"the driver's decoding processes answered {len(done)} of {len(args)} tasks")
        return results

    def alive(self) -> bool:
        return all(p.poll() is None for p in self._procs)

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


_pool: DecoderPool | None = None
_pool_lock = threading.Lock()


def pool() -> DecoderPool:
    """The driver process's pool (a process per core), started on first use, again if one of its
    processes died."""
    global _pool
    with _pool_lock:
        if _pool is not None and not _pool.alive():
            _pool.close()
            _pool = None
        if _pool is None:
            _pool = DecoderPool(os.cpu_count() or 1)
            atexit.register(_pool.close)
        return _pool


def _serve() -> None:
    """A process of the pool: answer tasks from stdin on stdout until stdin closes."""
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
