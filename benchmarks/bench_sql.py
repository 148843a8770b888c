"""`msglake sql` and `msglake history` cold (in-process: JVM and session start) vs warm (through `msglake serve`).

    .venv/bin/python benchmarks/bench_sql.py [--messages 20000] [--runs 5]

On the demo lake (`msglake demo --messages N` in bench-data/sql-N/, made once), times whole
commands as a user runs them, each a new process: `SELECT count(*) FROM messages`, a `v_trace`
lookup of one traceId and `msglake history` of the same traceId (its story, as JSON), first
with `--in-process`, then with `msglake serve` running for the lake (started once, not timed).
Reports the median wall time of --runs runs of each, and checks both ways print the same answer.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent
MSGLAKE = str(Path(sys.executable).parent / "msglake")


def msglake(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run ``msglake ARGS`` as a new process: (wall seconds, its output); a failure ends the benchmark."""
    started = time.monotonic()
    r = subprocess.run([MSGLAKE, *args], cwd=cwd, env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if r.returncode:
        raise SystemExit(f"msglake {' '.join(args)} failed: {r.stderr.strip()}")
    return took, r.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=20_000, help="sample messages per broker (default 20,000: make demo's)")
    p.add_argument("--runs", type=int, default=5, help="runs of each query and mode (default 5)")
    args = p.parse_args()

    base = REPO / "bench-data" / f"sql-{args.messages}"
    base.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSGLAKE_")}
    env["MSGLAKE_JARS_DIR"] = str(REPO / ".jars")
    os.environ.update(env)
    if not (base / "lake" / "messages" / "_delta_log").is_dir():
        print(f"building the demo lake in {base} ...", flush=True)
        subprocess.run([MSGLAKE, "demo", "--messages", str(args.messages)], cwd=base, check=True,
                       stdout=subprocess.DEVNULL)
    _, out = msglake(["sql", "--in-process", "--format", "csv",
                      "SELECT traceId FROM v_trace GROUP BY traceId ORDER BY count(*) DESC, traceId LIMIT 1"], base)
    trace_id = out.splitlines()[1]
    commands = {"count": ["sql", "--format", "csv", "SELECT count(*) FROM messages"],
                "v_trace lookup": ["sql", "--format", "csv",
                                   f"SELECT * FROM v_trace WHERE traceId = '{trace_id}' ORDER BY hopIndex"],
                "history": ["history", trace_id, "--format", "json"]}

    result: dict = {"messages_per_broker": args.messages, "runs": args.runs, "commands": commands, "seconds": {}}
    answers = {}
    for name, command in commands.items():
        times = []
        for _ in range(args.runs):
            took, answers[name] = msglake([*command, "--in-process"], base)
            times.append(took)
        result["seconds"][f"{name}, cold (in-process)"] = statistics.median(times)
        print(f"{name}, cold: median {statistics.median(times):.2f} s of {[round(t, 2) for t in times]}", flush=True)

    server = subprocess.Popen([MSGLAKE, "serve"], cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        if "serving" not in line:
            raise SystemExit(f"msglake serve did not start: {line}{server.stderr.read()}")
        for name, command in commands.items():
            msglake(command, base)  # the server's first run of this command
            times = []
            for _ in range(args.runs):
                took, out = msglake(command, base)
                times.append(took)
                assert out == answers[name], f"{name}: the server's answer differs"
            result["seconds"][f"{name}, warm (msglake serve)"] = statistics.median(times)
            print(f"{name}, warm: median {statistics.median(times):.2f} s of {[round(t, 2) for t in times]}",
                  flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    write("sql", result)


if __name__ == "__main__":
    main()
