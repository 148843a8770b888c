"""`msglake replay` of the worked example (examples/replay/: seven messages), as a user runs it.

    .venv/bin/python benchmarks/bench_worked_example.py [--runs 5] [--alternate=-XX:TieredStopAtLevel=1]

Issue 17's small-input target: this command in <= 10 s wall, Spark start included. Times
``msglake replay ... --json-out`` as a new process each run (JVM, session and replay), with the
replay's own figure (``replay took``, after the session is up), then the same replay run again
and again in one session (``warm``: no JVM start, the JIT and Spark's caches warm), so the
report says what the start, the first run's warm-up and the rounds' Spark jobs each cost.
Every run must write the same bytes.

``--alternate OPTS`` also times the command with ``OPTS`` given to the driver JVM
(``SPARK_SUBMIT_OPTS``), the two alternating run by run (this machine's speed drifts by tens of
per cent within an hour, so back-to-back blocks would measure the drift).
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from bench_sql import msglake  # benchmarks/ is on sys.path when a script in it runs
from results_file import write

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "replay"
AS_OF = "2026-11-01T10:00:20Z"


def replay_args(out: str) -> list[str]:
    return ["replay", "--messages", str(EXAMPLE / "messages.jsonl"), "--policies", str(EXAMPLE / "policies.yaml"),
            "--events", str(EXAMPLE / "events.jsonl"), "--as-of", AS_OF, "--json-out", out]


def digest(out: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(out)):
        h.update(name.encode() + Path(out, name).read_bytes())
    return h.hexdigest()


def cold(java_options: str, cwd: str) -> tuple[float, float, str]:
    """One ``msglake replay`` process: (wall seconds, the replay's own seconds, output digest)."""
    out = tempfile.mkdtemp(prefix="out-", dir=cwd)
    wall, stdout = msglake(replay_args(out), Path(cwd), {**os.environ, "SPARK_SUBMIT_OPTS": java_options})
    own = re.search(r"replay took ([\d.]+)s", stdout)
    if own is None:
        raise SystemExit(f"msglake replay printed no 'replay took' line:\n{stdout[-2000:]}")
    return wall, float(own.group(1)), digest(out)


def warm(runs: int, cwd: str) -> tuple[list[float], set[str]]:
    """The same replay ``runs + 1`` times in one session; the first run (the JVM's warm-up) is not counted."""
    from msglake.pipelines.jobs.replay import run_replay
    from msglake.pipelines.session import build_session
    from msglake.pipelines.settings import load

    settings = load()
    spark = build_session(settings, app_name="bench-worked-example")
    as_of = dt.datetime.fromisoformat(AS_OF.replace("Z", "+00:00"))
    times, digests = [], set()
    for i in range(runs + 1):
        out = tempfile.mkdtemp(prefix="warm-", dir=cwd)
        started = time.monotonic()
        run_replay(spark, settings, as_of=as_of, messages=str(EXAMPLE / "messages.jsonl"),
                   policies=str(EXAMPLE / "policies.yaml"), events=[str(EXAMPLE / "events.jsonl")], json_out=out)
        if i:
            times.append(time.monotonic() - started)
        digests.add(digest(out))
    spark.stop()
    return times, digests


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each kind (default 5)")
    p.add_argument("--alternate", metavar="OPTS", default=None,
                   help="also time the command with these driver JVM options, alternating with the default "
                        "(write --alternate=OPTS: the options start with a dash)")
    args = p.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs: give 1 or more")

    variants = {"default": ""} | ({args.alternate: args.alternate} if args.alternate else {})
    result: dict = {"runs": args.runs, "as_of": AS_OF, "cold": {}}
    digests = set()
    with tempfile.TemporaryDirectory(prefix="msglake-worked-") as cwd:
        os.environ["MSGLAKE_LAKE_ROOT"] = os.path.join(cwd, "lake")  # the command writes no table; keep it out of the repo
        walls: dict[str, list[float]] = {k: [] for k in variants}
        owns: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(args.runs):
            for name, opts in variants.items():
                wall, own, d = cold(opts, cwd)
                walls[name].append(wall)
                owns[name].append(own)
                digests.add(d)
                print(f"run {i + 1} [{name}]: {wall:.1f} s wall, replay {own:.1f} s", flush=True)
        for name in variants:
            result["cold"][name] = {"wall_median_s": round(statistics.median(walls[name]), 2),
                                    "replay_median_s": round(statistics.median(owns[name]), 2),
                                    "wall_s": [round(t, 2) for t in walls[name]],
                                    "replay_s": [round(t, 2) for t in owns[name]]}
        times, warm_digests = warm(args.runs, cwd)
        digests |= warm_digests
    if len(digests) != 1:
        raise SystemExit(f"the runs wrote different outputs ({len(digests)} different digests)")
    result["warm_s"] = [round(t, 2) for t in times]
    result["warm_median_s"] = round(statistics.median(times), 2)
    print("\n| how | median wall | of it, the replay | target |\n|---|---|---|---|")
    for name, r in result["cold"].items():
        label = "msglake replay, a new process" + ("" if name == "default" else f" ({name})")
        print(f"| {label} | {r['wall_median_s']} s | {r['replay_median_s']} s | <= 10 s |")
    print(f"| the replay again in one session (warm) | {result['warm_median_s']} s | | |")
    write("worked-example", result)


if __name__ == "__main__":
    main()
