"""The quality suites' great-expectations import (quality/suites.py)."""
from __future__ import annotations

import subprocess
import sys

PROBE = """
from msglake.quality import suites
from msglake.quality.suites import Check, expectation
gx = suites.great_expectations()
check = Check("n", "error", "no nulls", "ExpectColumnValuesToNotBeNull", {"column": "topic"})
print("loaded", gx.__name__, type(expectation(check)).__name__)
"""


def test_great_expectations_loads_where_main_has_no_file():
    # `python -c` gives __main__ neither a spec nor a file, as pytest-xdist's workers and embedding
    # hosts do: a plain `import great_expectations` there ends the process with status 0 and no output.
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["loaded", "great_expectations", "ExpectColumnValuesToNotBeNull"]
