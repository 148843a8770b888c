"""Running a streaming query to its end, or stopping it gracefully: shared by the streaming jobs."""
from __future__ import annotations

import threading
import time


def wait_or_stop(query, stop: threading.Event | None, stop_timeout: float) -> None:
    """Wait for ``query`` to end, or stop it gracefully once ``stop`` is set.

    A micro-batch running when ``stop`` is set may finish (its Delta writes and checkpoint
    commit) within ``stop_timeout`` seconds; past that it is abandoned, to be replayed on restart.
    Raises the query's ``StreamingQueryException`` if it failed.
    """
    while query.isActive:
        if query.awaitTermination(0.5):
            break
        if stop is not None and stop.is_set():
            deadline = time.monotonic() + stop_timeout
            while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.1)
            query.stop()
            break
    query.awaitTermination()
