"""The peer of msglake's RocketMQ decode: RocketMQ's own Java ``MessageDecoder`` on the same files.

    .venv/bin/python benchmarks/java_peer.py

The harness (benchmarks/java/, ``msglake.bench.PeerDecode``) maps each CommitLog file and decodes
every record as the broker walks them, inner batches unwrapped into their messages; it prints its
best timed pass after untimed ones that warm the JIT. Its passes read one mapping made before them
unless ``map_per_pass`` (``--map-per-pass``): each pass then maps the files and unmaps them after, as
each of msglake's decode calls does. suite.py and bench_decode.py call :func:`run`;
``make bench`` runs this script first, which builds the harness with Maven once (a stamp file in
benchmarks/java/target/, rebuilt when the pom or the Java source is newer) and checks it on the
real broker files in tests/data. Without java, mvn or taskset the peer is skipped, said in one line.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_ingest import decode_pass  # benchmarks/ is on sys.path when a script in it runs

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "java"
TARGET = PROJECT / "target"
STAMP = TARGET / ".built"
BUILD_LOG = TARGET / "build.log"
MAIN_CLASS = "msglake.bench.PeerDecode"
#: Real brokers' CommitLog files (tests/data/*/README.md): the peer must count what msglake counts.
REAL_STORES = (HERE.parent / "tests" / "data" / "rocketmq", HERE.parent / "tests" / "data" / "rocketmq-batch")
FORMAT = "rocketmq-commitlog"
#: Messages the untimed passes (the JIT's warm-up) decode, and then the timed ones (at least 3):
#: counted in work, as a small data set needs many passes (2 of 23,760 messages left the JIT cold).
WORK_MESSAGES = 2_000_000


def sources() -> list[Path]:
    return [PROJECT / "pom.xml", *sorted((PROJECT / "src").rglob("*.java"))]


def built() -> bool:
    """The stamp is there and newer than every source (what make decides from the same files)."""
    return STAMP.exists() and all(STAMP.stat().st_mtime >= p.stat().st_mtime for p in sources())


def missing_tool() -> str | None:
    """Why the peer cannot run on this machine (a tool not found), or None."""
    for tool, why in (("java", "to run it"), ("taskset", "to pin it to one core"), ("mvn", "to build it")):
        if tool == "mvn" and built():
            continue
        if not shutil.which(tool):
            return f"{tool} not found ({why})"
    return None


def build() -> str | None:
    """Build the harness unless it is up to date: ``mvn package`` compiles it and copies its
    dependencies into target/lib (a fresh copy, so an older rocketmq-common cannot linger).
    Returns None when it is ready, else why not, in one line."""
    why = missing_tool()
    if why or built():
        return why
    shutil.rmtree(TARGET / "lib", ignore_errors=True)
    TARGET.mkdir(exist_ok=True)
    started = time.monotonic()
    with open(BUILD_LOG, "w") as log:
        proc = subprocess.run(["mvn", "--quiet", "--batch-mode", "-f", str(PROJECT / "pom.xml"), "package"],
                              stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode:
        return f"mvn package failed (log: {BUILD_LOG})"
    seconds = time.monotonic() - started
    STAMP.write_text(f"{seconds:.1f}\n")
    print(f"built the Java peer (benchmarks/java) in {seconds:.1f}s", flush=True)
    return None


@functools.cache
def ready() -> str | None:
    """None when the peer can run (built now if it was not), else why not, said once in one line."""
    why = build()
    if why:
        print(f"Java peer skipped: {why}", flush=True)
    return why


def commitlog_files(data: Path) -> list[Path]:
    """The CommitLog files msglake's codec finds under ``data``, in offset order."""
    from msglake.formats.registry import get_codec

    return [data / seg.path for seg in get_codec(FORMAT).scan(str(data)).segments]


def harness(files: list[Path], work: int, check_crc: bool = False, map_per_pass: bool = False) -> dict:
    """One run of the harness on ``files``, pinned to this process's first CPU: its JSON line.
    ``-XX:ActiveProcessorCount=1`` sizes the JVM (GC, JIT threads) for the one core it gets.
    ``check_crc``: the decoder checks each body's BODYCRC, as msglake does by default.
    ``map_per_pass``: each pass maps the files and unmaps them after, as each of msglake's decode
    calls does (its timed passes then fault the pages into a new mapping, as msglake's do);
    otherwise every pass reads one mapping made before the first, whose pages stay mapped."""
    cpu = min(os.sched_getaffinity(0))
    cmd = ["taskset", "-c", str(cpu), "java", "-XX:ActiveProcessorCount=1", "-cp",
           f"{TARGET / 'classes'}:{TARGET / 'lib'}/*", MAIN_CLASS, "--messages", str(work),
           *(["--check-crc"] if check_crc else []), *(["--map-per-pass"] if map_per_pass else []),
           *map(str, files)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"the Java peer failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**out, "seconds": round(out["seconds"], 4), "mbPerS": out["bytes"] / out["seconds"] / 1e6, "cpu": cpu}


@functools.cache
def check_real_files() -> None:
    """The peer and msglake count the same messages in the real brokers' files (a blank end
    record, a file that ends on its last record, a batch send); once per process."""
    for store in REAL_STORES:
        ours = decode_pass(FORMAT, store)[0]
        peer = harness(commitlog_files(store), 0)["messages"]
        if peer != ours:
            raise RuntimeError(f"{store}: the Java peer decoded {peer} messages, msglake {ours}")


def run(data: Path, expected: int, *, work: int = WORK_MESSAGES, check_crc: bool = False,
        map_per_pass: bool = False) -> dict:
    """RocketMQ's ``MessageDecoder`` over the CommitLog files under ``data``: the fastest timed
    pass, after untimed ones (``work`` messages each way, see :data:`WORK_MESSAGES`), BODYCRC
    checked when ``check_crc``, the files mapped once or per pass (``map_per_pass``, see
    :func:`harness`). Its message count must be ``expected`` (msglake's), or this raises.
    Without the peer: ``{"skipped": why}``."""
    why = ready()
    if why:
        return {"skipped": why}
    check_real_files()
    out = harness(commitlog_files(data), work, check_crc, map_per_pass)
    if out["messages"] != expected:
        raise RuntimeError(f"{data}: the Java peer decoded {out['messages']:,} messages, msglake {expected:,}")
    return out


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    if ready():
        return 0
    check_real_files()
    print("Java peer ready: it counts what msglake counts in the real brokers' files", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
