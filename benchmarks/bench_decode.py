"""Decode alone, one core, no Spark: the Python path next to the native core, for both formats,
and for RocketMQ its own Java ``MessageDecoder`` on the same files.

    .venv/bin/python benchmarks/bench_decode.py [--messages 1000000] [--formats nsq-ext,rocketmq-commitlog]
        [--repeat 3] [--decompress]

Uses the suite's data sets (bench-data/suite-<format>-<N>/data/, generated once, no bad inputs) and
times what a Spark task runs (:func:`bench_ingest.decode_pass`: decode every file chunk by chunk,
the scan untimed) with ``MSGLAKE_NATIVE=0`` and ``=1``, best of ``--repeat`` passes each, the
page cache warm and the process pinned to one CPU. Both paths must decode every message. The
Java peer (:func:`java_peer.run`, pinned to the same CPU) must count the same messages. The peer
is compared doing the same work both ways: BODYCRC unchecked (its decoder's default) against the
native core with ``verifyCrc: false``, and checked (msglake's default) against the native core as
it runs by default. ``--decompress`` also times both paths with RocketMQ's ``decompress: true``
(about 1 % of the suite's records carry a producer-compressed body of ~6 KB: zlib, lz4, zstd).
For the native path it also splits a pass into the core's calls, the chunk reads and the Python
steps around them (``native_parts``).
Writes benchmarks/results/decode-<timestamp>.json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import java_peer  # benchmarks/ is on sys.path when a script in it runs
from bench_ingest import decode_pass, ensure_data
from results_file import write
from suite import PEER_FORMAT, data_dir

PATHS = {"python": "0", "native": "1"}


def best_pass(fmt: str, data, path: str, repeat: int, options: dict | None = None) -> dict:
    """The fastest of ``repeat`` decode passes on one path, with the codec's ``options``."""
    os.environ["MSGLAKE_NATIVE"] = PATHS[path]  # read by each codec when it is made
    runs = [decode_pass(fmt, data, options) for _ in range(repeat)]
    n, on_disk, seconds = min(runs, key=lambda r: r[2])
    return {"messages": n, "bytes": on_disk, "seconds": round(seconds, 3), "messagesPerS": n / seconds,
            "mbPerS": on_disk / seconds / 1e6}


class _Timed:
    """``target`` with the time spent in each of its callables added to ``spent[key]``."""

    def __init__(self, target, spent: dict, key: str):
        self._target, self._spent, self._key = target, spent, key

    def __getattr__(self, name):
        fn = getattr(self._target, name)

        def timed(*args, **kw):
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self._spent[self._key] += time.perf_counter() - t

        return timed


def native_parts(fmt: str, data, repeat: int, expected: int) -> dict:
    """Where the time of a native pass goes (the fastest of ``repeat``): in the core's calls (with
    pyo3's conversion of their arguments), in the chunk reads (the kernel's copy), and the rest,
    the codec's Python steps around them; the rest also holds pyarrow's import of each batch, the
    freeing of the core's buffers when a batch is dropped, and reads outside ``_read_chunk`` (a
    record larger than a chunk, quarantined regions), which the clean data sets do not have."""
    from msglake.formats.registry import get_codec

    os.environ["MSGLAKE_NATIVE"] = "1"
    codec = get_codec(fmt)
    segments = codec.scan(str(data)).segments
    spent = {"core": 0.0, "read": 0.0}
    codec._core = _Timed(codec._core, spent, "core")
    codec._read_chunk = _Timed(codec, spent, "read")._read_chunk
    best = None
    for _ in range(repeat):
        spent.update(core=0.0, read=0.0)
        t = time.perf_counter()
        decoded = 0
        for seg in segments:
            for res in codec.decode(str(data), seg, 0, seg.committed_end):
                decoded += res.batch.num_rows - res.batch.column("messageId").null_count
        total = time.perf_counter() - t
        assert decoded == expected, (fmt, decoded, expected)
        if best is None or total < best["seconds"]:
            best = {"seconds": round(total, 3), "coreSeconds": round(spent["core"], 3),
                    "readSeconds": round(spent["read"], 3), "pythonSeconds": round(total - sum(spent.values()), 3)}
    return best


def peer_lines(fmt: str, data, expected: int, runs: dict, repeat: int) -> list[str]:
    """RocketMQ's Java decoder on the same files, BODYCRC checked and not, each next to the native
    core doing the same (``runs["java"]``, ``runs["javaCrc"]``, ``runs["nativeNoCrc"]``), and with the
    files mapped per pass as msglake maps them (``runs["javaMappedPerPass"]``); the table rows."""
    peer = runs["java"] = java_peer.run(data, expected)
    if "skipped" in peer:
        return [f"| {fmt} | java (RocketMQ MessageDecoder) | skipped: {peer['skipped']} | | |"]
    crc = runs["javaCrc"] = java_peer.run(data, expected, check_crc=True)
    # Reads comparable to msglake's (java_peer.harness: the files mapped per pass; msglake maps
    # 64 MiB windows of them, the peer each whole file).
    fresh = runs["javaMappedPerPass"] = java_peer.run(data, expected, map_per_pass=True)
    fast = runs["nativeNoCrc"] = best_pass(fmt, data, "native", repeat, {"verifyCrc": False})
    assert fast["messages"] == expected, (fmt, fast["messages"], expected)
    runs["nativeOverJava"] = runs["native"]["messagesPerS"] / peer["messagesPerS"]
    runs["nativeOverJavaBothCrc"] = runs["native"]["messagesPerS"] / crc["messagesPerS"]
    runs["nativeOverJavaNoCrc"] = fast["messagesPerS"] / peer["messagesPerS"]
    runs["nativeOverJavaMappedPerPass"] = runs["native"]["messagesPerS"] / fresh["messagesPerS"]

    def row(name, r):
        return f"| {fmt} | {name} | {r['messagesPerS']:,.0f} | {r['mbPerS']:,.1f} | {r['seconds']} |"

    return [row("java (RocketMQ MessageDecoder)", peer), row("java, BODYCRC checked", crc),
            row("java, mapping the files per pass (as msglake's decode calls do)", fresh),
            row("native, verifyCrc false", fast),
            f"| {fmt} | native / java (native checks BODYCRC, java not) | {runs['nativeOverJava']:.2f}x | | |",
            f"| {fmt} | native / java, both check BODYCRC | {runs['nativeOverJavaBothCrc']:.2f}x | | |",
            f"| {fmt} | native / java, neither checks BODYCRC | {runs['nativeOverJavaNoCrc']:.2f}x | | |",
            f"| {fmt} | native / java mapping per pass (native checks BODYCRC, java not) | "
            f"{runs['nativeOverJavaMappedPerPass']:.2f}x | | |"]


def decompress_lines(fmt: str, data, expected: int, runs: dict, repeat: int) -> list[str]:
    """Both paths with the bodies producers compressed inflated (``runs["pythonDecompress"]``,
    ``runs["nativeDecompress"]``); the table rows."""
    out = []
    for path in PATHS:
        r = runs[f"{path}Decompress"] = best_pass(fmt, data, path, repeat, {"decompress": True})
        assert r["messages"] == expected, (fmt, path, r["messages"], expected)
        out.append(f"| {fmt} | {path}, decompress true | {r['messagesPerS']:,.0f} | {r['mbPerS']:,.1f} | {r['seconds']} |")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--formats", default="nsq-ext,rocketmq-commitlog")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--decompress", action="store_true",
                   help="also decode RocketMQ with decompress: true, on both paths")
    args = p.parse_args(argv)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as a Spark task has
    from msglake.formats.native import core

    if core(True) is None:
        print("the native core is not installed (make setup, or pip install ./native)", file=sys.stderr)
        return 2
    result = {"messages": args.messages, "formats": {}}
    lines = ["| format | path | msg/s | MB/s | seconds |", "|---|---|---:|---:|---:|"]
    for fmt in args.formats.split(","):
        data = data_dir(fmt, args.messages)
        expected = ensure_data(fmt, data, args.messages)
        decode_pass(fmt, data)  # warm the page cache
        runs = {path: best_pass(fmt, data, path, args.repeat) for path in PATHS}
        for path, r in runs.items():
            assert r["messages"] == expected, (fmt, path, r["messages"], expected)
            lines.append(f"| {fmt} | {path} | {r['messagesPerS']:,.0f} | {r['mbPerS']:,.1f} | {r['seconds']} |")
        runs["speedup"] = runs["native"]["messagesPerS"] / runs["python"]["messagesPerS"]
        lines.append(f"| {fmt} | native / python | {runs['speedup']:.2f}x | | |")
        parts = runs["nativeParts"] = native_parts(fmt, data, args.repeat, expected)
        lines.append(f"| {fmt} | native, where a pass goes | core {parts['coreSeconds']} s, reads {parts['readSeconds']} s, "
                     f"Python {parts['pythonSeconds']} s | | {parts['seconds']} |")
        if fmt == PEER_FORMAT:
            lines += peer_lines(fmt, data, expected, runs, args.repeat)
        if fmt == PEER_FORMAT and args.decompress:
            lines += decompress_lines(fmt, data, expected, runs, args.repeat)
        result["formats"][fmt] = runs
    write("decode", result)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
