"""Two or more builds of the native core, side by side in one process, timed chunk by chunk.

    .venv/bin/python benchmarks/bench_core_ab.py --format nsq-ext \\
        old=/tmp/old/native/target/release/libmsglake_native.so \\
        new=.venv/lib/python3.11/site-packages/msglake_native/msglake_native.abi3.so [--repeat 11]

Whole decode passes of this VM differ by 30 % from one minute to the next, more than most changes
to the core. Here every build decodes every chunk of the same real passes: the codec runs as
:func:`bench_ingest.decode_pass` does over the suite's 1M-message set, and each of its calls into
the core (``nsq_chunk`` / ``rmq_chunk``) is made once per build, the builds in turn (their order
flipped every call), each timed alone; the first build's answer is the one the codec goes on
with, and every build's answer is held until the next call (as a decode holds the previous
chunk's columns; before 2026-11-27, stop 42, only the first build's was, which favoured the
others by 5-10 %). Reported per build: its total time in that call per pass, best and median
of ``--repeat`` passes, and its ratio to the first build. Drift hits every build alike, so the ratio holds when
the absolute figures do not.

A build to compare against: check the older revision out in a worktree and build its crate as a
Python extension, e.g. ``git worktree add /tmp/old REV && cargo build --release --features
extension-module --manifest-path /tmp/old/native/Cargo.toml``. Every build must have the same
``API_VERSION`` as the codecs of this checkout (their call arguments are those of this checkout).
One pinned core, no Spark, page cache warm after the first pass.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

from bench_ingest import ensure_data  # benchmarks/ is on sys.path when a script in it runs
from suite import data_dir

CALLS = {"nsq-ext": "nsq_chunk", "rocketmq-commitlog": "rmq_chunk"}


def load_build(path: str):
    """The extension module in the file ``path``, loaded under its own name beside any other."""
    spec = importlib.util.spec_from_file_location("msglake_native", path)
    if spec is None:
        raise SystemExit(f"bench_core_ab: {path}: not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Alternating:
    """The core as the codec sees it: ``call`` goes to every build in turn and is timed per build."""

    def __init__(self, builds: dict, call: str):
        self.builds, self.call, self.names = builds, call, list(builds)
        self.spent = dict.fromkeys(self.names, 0.0)
        self._flip = False

    def __getattr__(self, name):
        first = self.builds[self.names[0]]
        if name == "Layout":
            # A layout is an object of its build: each build is given its own.
            return lambda schema: _Layouts({build: self.builds[build].Layout(schema) for build in self.names})
        if name != self.call:
            return getattr(first, name)

        def each(*args):
            self._flip = not self._flip
            answers = {}
            for build in (self.names if self._flip else self.names[::-1]):
                own = [a.of[build] if isinstance(a, _Layouts) else a for a in args]
                t = time.perf_counter()
                answers[build] = getattr(self.builds[build], name)(*own)
                self.spent[build] += time.perf_counter() - t
            # Every build's answer is held until the next call, as the codec holds the first's
            # (a decode holds the previous chunk's columns): a build whose answer were freed at
            # once would find its next chunk's memory warm in the cache, and measure 5-10 %
            # faster than the build listed first.
            self._held = answers
            return answers[self.names[0]]

        return each


class _Layouts:
    """One ``Layout`` per build, made from the same schema."""

    def __init__(self, of: dict):
        self.of = of


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("builds", nargs="+", metavar="NAME=PATH", help="a build's name and its extension module file")
    p.add_argument("--format", choices=sorted(CALLS), default="nsq-ext")
    p.add_argument("--messages", type=int, default=1_000_000, help="size of the suite's data set (default 1,000,000)")
    p.add_argument("--repeat", type=int, default=11, help="decode passes (default 11)")
    p.add_argument("--cpu", type=int, default=1, help="the one CPU to run on (default 1)")
    args = p.parse_args(argv)

    from msglake.formats import native
    from msglake.formats.registry import get_codec

    builds = {}
    for item in args.builds:
        name, sep, path = item.partition("=")
        if not sep or not name or not os.path.isfile(path):
            p.error(f"{item!r}: give NAME=PATH of an existing extension module file")
        builds[name] = load_build(path)
        found = getattr(builds[name], "API_VERSION", None)
        if found != native.API_VERSION:
            p.error(f"{name}: API_VERSION {found}, this checkout's codecs call API {native.API_VERSION}")
    os.sched_setaffinity(0, {args.cpu})
    os.environ["MSGLAKE_NATIVE"] = "1"
    data = data_dir(args.format, args.messages)
    ensure_data(args.format, data, args.messages)
    codec = get_codec(args.format)
    segments = codec.scan(str(data)).segments
    core = codec._core = Alternating(builds, CALLS[args.format])
    passes = {name: [] for name in builds}
    for i in range(args.repeat):
        core.spent = dict.fromkeys(builds, 0.0)
        for seg in segments:
            for _ in codec.decode(str(data), seg, 0, seg.committed_end):
                pass
        for name in builds:
            passes[name].append(core.spent[name])
        print(f"pass {i + 1}/{args.repeat}: " + ", ".join(f"{n} {s:.3f} s" for n, s in core.spent.items()),
              file=sys.stderr, flush=True)
    first = min(passes[core.names[0]])
    print(f"| build ({args.format}, `{core.call}` per pass) | best | median | best / {core.names[0]}'s |")
    print("|---|---:|---:|---:|")
    for name, seconds in passes.items():
        print(f"| {name} | {min(seconds):.3f} s | {statistics.median(seconds):.3f} s | {min(seconds) / first:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
