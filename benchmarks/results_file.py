"""Where benchmark results go: one JSON file per run under benchmarks/results/ (git-ignored)."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write(kind: str, result: dict) -> Path:
    """Write ``result`` (with the time and the machine added) as ``<kind>-<timestamp>.json``."""
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform()},
        **result,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{kind}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return path
