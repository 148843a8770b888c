"""The benchmark suite: msglake next to its baselines, in one run, on the same files.

    .venv/bin/python benchmarks/suite.py [--sizes 1000000,2000000,4000000,8000000]
        [--formats nsq-ext,rocketmq-commitlog] [--quick]
        [--only read,decode,ceiling,ingest,defaults,semantics,masters,memory]
        [--driver-memory 6g]

For every format and size, a data set is generated once under bench-data/suite-<format>-<N>/
(bodies 100-1000 B, the sample generators' headers: trace ids, tags, keys, delays, expiries;
several topics and partitions; reused while its marker file says it is complete). On those
files the suite measures:

1. raw read: bytes/s of reading the segment files sequentially in Python (1 MiB reads), page
   cache warm (read once, then timed);
2. decode: the codec alone, no Spark, the fastest of three passes after an untimed one, on one pinned core (each file
   chunk by chunk; the scan untimed); for RocketMQ also its own Java ``MessageDecoder`` on the same files (benchmarks/java_peer.py, one
   pinned core, its fastest pass after untimed ones that warm its JIT) and msglake's msg/s over its;
3. engine ceiling: Spark reading the same messages already decoded (Parquet with the messages
   table's schema, written once, untimed) and writing them to a Delta ``messages`` table
   partitioned by topic/partition (timed): the best any Spark ingester could do;
4. msglake ingest end to end (available-now) at every size with the semantics transforms off
   (no retry marking, every quality rule off) and with the default settings (retry marking,
   default quality rules: issue 19's target); at the smallest size also the semantics stream
   (available-now) after an ingest with the defaults, timed separately and together;
5. scaling: cost per message (µs) at each size and its spread relative to the smallest, and the
   ingest at the smallest size in local[1] next to local[2];
6. memory: peak RSS of the driver JVM (in local mode it is the executor too), of the Python
   workers (RSS and PSS, summed) and of the driver Python, sampled from /proc every 0.2 s,
   during an ingest of a backlog 4x maxBytesPerTrigger and of one 8x (the next size's data,
   same trigger), each in a fresh process so an earlier run's heap does not count.

Each session is warmed up before its timed runs by an untimed ingest of a smaller set, with the
defaults too when they are measured (a session's first ingest with them took 34-43 s against
25-31 s for the next, 1M RocketMQ messages: the JIT compiles their code paths, 32 s of compile
time against 15 s), and an untimed Parquet -> Delta write. Every Spark run records what it cost the
JVM (benchmarks/jvm_work.py) and checks the rows it wrote against the messages generated. Writes
benchmarks/results/suite-<timestamp>.json and .md (machine, one table per format, the ratios
of issue 7 next to their targets) and prints the Markdown. ``--quick``: sizes 20,000 and
40,000, a smoke test. ``--only`` runs some of the measures (the data sets are made anyway);
the memory runs go first, before this process starts a JVM of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

# benchmarks/ is on sys.path when a script in it runs; the repo too, for a clone without the editable install.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(REPO))

import java_peer  # noqa: E402
from bench_ingest import decode_pass, ensure_data  # noqa: E402
from jvm_work import JvmWork, line  # noqa: E402
from results_file import write  # noqa: E402

FORMATS = ("nsq-ext", "rocketmq-commitlog")
PARTS = ("read", "decode", "ceiling", "ingest", "defaults", "semantics", "masters", "memory")
DEFAULT_SIZES = (1_000_000, 2_000_000, 4_000_000, 8_000_000)
QUICK_SIZES = (20_000, 40_000)
#: Messages of the untimed ingest (and Parquet -> Delta write) that warm each session up: JIT,
#: class loading, Python workers. A few thousand are not enough: in a cold session the first
#: 1M-message Delta write took twice as long as the same write once warm (16.7 s vs 8.3 s).
WARMUP, QUICK_WARMUP = 250_000, 5_000
READ_BYTES = 1 << 20
#: Rows per Parquet row group of the engine-ceiling input (Spark splits files at row groups).
ROW_GROUP_ROWS = 65_536
SAMPLE_SECONDS = 0.2
MEMORY_MARK = "SUITE-MEMORY "
#: Issue 7's targets.
TARGET_CEILING, TARGET_DECODE, TARGET_FLAT, TARGET_CORES, TARGET_MEMORY = 0.8, 2_000_000, 0.15, 1.7, 0.15
#: Issue 19's: ingest with the default settings >= TARGET_CEILING x the ceiling, at this size.
TARGET_DEFAULTS_SIZE = 4_000_000
#: Issue 18's: msglake's decode at least as fast as RocketMQ's own Java decoder, both on one core.
TARGET_PEER = 1.0
#: The format whose broker ships a decoder to compare with (RocketMQ's ``MessageDecoder``).
PEER_FORMAT = "rocketmq-commitlog"

STARTED = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.0f}s] {msg}", flush=True)


# --------------------------------------------------------------------------- settings and data


def settings_for(lake: Path, data: Path, fmt: str, master: str, driver_memory: str, *, semantics: bool,
                 trigger_bytes: int | None = None):
    """Settings of one run (built as bench_trace.py's): the lake under ``lake``, one source
    ``bench``; ``semantics`` False turns retry marking and every quality rule off."""
    from msglake.pipelines import settings as S

    doc = S.from_dict(S.default_document()).model_dump()
    doc["lake"]["root"] = str(lake)
    doc["spark"]["master"] = master
    doc["spark"]["conf"]["spark.driver.memory"] = driver_memory
    source = {"name": "bench", "format": fmt, "path": str(data)}
    if fmt == "nsq-ext":
        source["storeHost"] = "10.0.0.1:4150"
    doc["sources"] = [source]
    if trigger_bytes:
        doc["ingest"]["maxBytesPerTrigger"] = trigger_bytes
    if not semantics:
        doc["ingest"]["dedupWatermarkSeconds"] = 0
        doc["quality"]["rules"] = {rule: "off" for rule in doc["quality"]["rules"]}
    return S.from_dict(doc, "benchmarks/suite.py")


def base_dir(fmt: str, n: int | str) -> Path:
    return REPO / "bench-data" / f"suite-{fmt}-{n}"


def data_dir(fmt: str, n: int | str) -> Path:
    """Where the data set of ``n`` messages is generated (its Parquet copy is beside it, in
    ``base_dir``). Every bench that uses the suite's sets takes them from here: ``ensure_data``
    removes a folder without its ``.complete`` marker, so a bench that generated into
    ``base_dir`` itself deleted the suite's set and its Parquet copy, and the suite's next run
    generated both again."""
    return base_dir(fmt, n) / "data"


def codec_options(fmt: str):
    """The codec options of the runs' source, so the Parquet input holds the rows ingest writes."""
    return settings_for(REPO, REPO, fmt, "local[2]", "1g", semantics=False).source().codec_options()


def messages_rows(batch):
    """A codec batch (source schema) -> its decoded messages as rows of the ``messages`` table:
    lineage filled as the sink would, retry marking and derived columns null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from msglake.schemas.messages import DECODED_SCHEMA, MESSAGE_SCHEMA

    keep = pc.and_(pc.is_null(batch.column("reason")), pc.is_valid(batch.column("messageId")))
    b = batch.filter(keep)
    n = b.num_rows
    fill = {"ingestedAt": pa.scalar(time.time_ns() // 1000, MESSAGE_SCHEMA.field("ingestedAt").type),
            "ingestBatchId": pa.scalar(0, pa.int64())}
    columns = [b.column(name) for name in DECODED_SCHEMA.names] + [
        pa.repeat(fill[f.name], n) if f.name in fill else pa.nulls(n, f.type)
        for f in MESSAGE_SCHEMA if f.name not in DECODED_SCHEMA.names]
    return pa.Table.from_arrays(columns, schema=MESSAGE_SCHEMA)


def ensure_parquet(fmt: str, data: Path, out: Path, expected: int) -> int:
    """The decoded messages as Parquet (one file per segment), written once; returns its bytes."""
    import pyarrow.parquet as pq

    from msglake.formats.registry import get_codec
    from msglake.schemas.messages import MESSAGE_SCHEMA

    if not (out / ".complete").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        started = time.monotonic()
        codec = get_codec(fmt, codec_options(fmt))
        rows = 0
        for k, seg in enumerate(codec.scan(str(data)).segments):
            with pq.ParquetWriter(out / f"part-{k:05d}.parquet", MESSAGE_SCHEMA, compression="snappy") as w:
                for res in codec.decode(str(data), seg, 0, seg.committed_end):
                    table = messages_rows(res.batch)
                    if table.num_rows:
                        w.write_table(table, row_group_size=ROW_GROUP_ROWS)
                        rows += table.num_rows
        assert rows == expected, (rows, expected)
        (out / ".complete").write_text(str(rows))
        log(f"  wrote the decoded messages as Parquet in {time.monotonic() - started:.1f}s (untimed)")
    return sum(p.stat().st_size for p in out.glob("*.parquet"))


# --------------------------------------------------------------------------- measures without Spark


def segments(fmt: str, data: Path) -> list:
    from msglake.formats.registry import get_codec

    return get_codec(fmt, codec_options(fmt)).scan(str(data)).segments


def data_bytes(fmt: str, data: Path) -> int:
    """Bytes of the segments that hold data (up to each one's committed end)."""
    return sum(seg.committed_end for seg in segments(fmt, data))


def raw_read(fmt: str, data: Path) -> dict:
    """Sequential 1 MiB reads of every segment's data bytes, after one untimed read (warm cache)."""
    segs = segments(fmt, data)
    buf = memoryview(bytearray(READ_BYTES))

    def one_pass() -> int:
        done = 0
        for seg in segs:
            left = seg.committed_end
            with open(data / seg.path, "rb", buffering=0) as f:
                while left > 0:
                    got = f.readinto(buf[:min(left, READ_BYTES)])
                    if not got:
                        break
                    done += got
                    left -= got
        return done

    one_pass()  # warms the page cache: the figure is the ceiling of memory, not of the disk
    passes = total = 0
    started = time.monotonic()
    while True:  # at least half a second, so a small data set is timed to a useful precision
        total += one_pass()
        passes += 1
        seconds = time.monotonic() - started
        if seconds >= 0.5:
            break
    return {"bytes": total // passes, "segments": len(segs), "passes": passes, "seconds": round(seconds, 3),
            "mbPerS": total / seconds / 1e6, "pageCache": "warm (read once before the timed reads)"}


#: Timed decode passes; the fastest counts, as the Java peer's fastest timed pass does.
DECODE_PASSES = 3


def decode(fmt: str, data: Path, expected: int) -> dict:
    """The fastest of :data:`DECODE_PASSES` decode passes after an untimed one, this process
    pinned to one core (as the Java peer's JVM is) for them. Measured as the peer is: one pass
    alone (until stop 66) swung from 0.77x to 0.94x of the peer in two runs of the same code,
    while the peer's own figure is the best of its passes after untimed ones that warm its JIT
    and heap. A first pass here warms the process too (its allocator's segments: a RocketMQ
    pass 0.72 s against 0.63-0.65 s for the next ones, 2026-12-03), so it is not timed either
    (until stop 68 it was, and the best of three was then one of two warm passes)."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        decode_pass(fmt, data)
        runs = [decode_pass(fmt, data) for _ in range(DECODE_PASSES)]
    finally:
        os.sched_setaffinity(0, cores)
    n, on_disk, seconds = min(runs, key=lambda r: r[2])
    assert n == expected, (n, expected)
    return {"messages": n, "bytes": on_disk, "seconds": round(seconds, 3), "messagesPerS": n / seconds,
            "mbPerS": on_disk / seconds / 1e6, "passes": DECODE_PASSES,
            "passSeconds": [round(r[2], 3) for r in runs]}


def peer_decode(data: Path, expected: int, ours: dict) -> dict:
    """RocketMQ's own decoder on the same files (:func:`java_peer.run`), with msglake's msg/s
    (``ours``, :func:`decode`) over the peer's; ``{"skipped": why}`` without the peer. The peer runs
    as its decoder does by default (BODYCRC not checked); as ``checkedCrc``, checking BODYCRC as
    msglake does by default (so doing the same work); and as ``perPassRun``, mapping the files
    per pass (``java_peer.harness``), as msglake's decode calls do."""
    peer = java_peer.run(data, expected)
    if "skipped" not in peer:
        crc = peer["checkedCrc"] = java_peer.run(data, expected, check_crc=True)
        fresh = peer["perPassRun"] = java_peer.run(data, expected, map_per_pass=True)
        for r in (peer, crc, fresh):
            r["msglakeOverPeer"] = ours["messagesPerS"] / r["messagesPerS"]
        log(f"  RocketMQ MessageDecoder (Java): {peer['messagesPerS']:,.0f} msg/s, {crc['messagesPerS']:,.0f} "
            f"checking BODYCRC, {fresh['messagesPerS']:,.0f} mapping the files per pass; msglake (checking it) / "
            f"Java {peer['msglakeOverPeer']:.2f}x, / Java checking it {crc['msglakeOverPeer']:.2f}x, / Java "
            f"mapping per pass {fresh['msglakeOverPeer']:.2f}x")
    return peer


# --------------------------------------------------------------------------- Spark runs


def forget(spark, lake: Path) -> None:
    """Drop the catalog names a run registered (the tables are external: only names go), then its lake."""
    from msglake.schemas import LAKE_TABLES

    for spec in LAKE_TABLES:
        spark.sql(f"DROP TABLE IF EXISTS `{spec.name}`")
    shutil.rmtree(lake, ignore_errors=True)


def table_rows(spark, settings, name: str) -> int:
    return spark.read.format("delta").load(settings.lake.table_path(name)).count()


def ingest_run(spark, settings, expected: int) -> dict:
    """``msglake.pipelines.jobs.ingest.ingest`` (available-now) into an empty lake, its rows checked."""
    from msglake.pipelines.jobs.ingest import ingest

    work = JvmWork(spark)
    before = work.now()
    summary = ingest(spark, settings)
    jvm = work.since(before)
    assert summary.messages == expected and summary.balanced, "\n".join(summary.lines())
    rows = table_rows(spark, settings, "messages")
    assert rows == expected, (rows, expected)
    return {"master": settings.spark.master, "messages": expected, "batches": summary.batches,
            "seconds": round(summary.seconds, 2), "messagesPerS": expected / summary.seconds,
            "mbPerS": summary.message_bytes / summary.seconds / 1e6,
            "usPerMessage": summary.seconds / expected * 1e6,
            "triggerBytes": settings.ingest.maxBytesPerTrigger, "jvm": jvm}


def run_ingest(spark, fmt: str, data: Path, lake: Path, expected: int, master: str, driver_memory: str,
               *, semantics: bool = False) -> dict:
    shutil.rmtree(lake, ignore_errors=True)
    settings = settings_for(lake, data, fmt, master, driver_memory, semantics=semantics)
    out = ingest_run(spark, settings, expected)
    forget(spark, lake)
    return out


def engine_ceiling(spark, fmt: str, parquet: Path, lake: Path, expected: int, driver_memory: str) -> dict:
    """Decoded Parquet -> Delta ``messages`` (same table definition as the ingest's), timed write."""
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas import MESSAGES_TABLE

    shutil.rmtree(lake, ignore_errors=True)
    settings = settings_for(lake, parquet, fmt, "local[2]", driver_memory, semantics=False)
    path = ensure_table(spark, settings, MESSAGES_TABLE)
    df = spark.read.parquet(str(parquet))
    work = JvmWork(spark)
    before, started = work.now(), time.monotonic()
    df.write.format("delta").mode("append").save(path)
    seconds, jvm = time.monotonic() - started, work.since(before)
    rows = table_rows(spark, settings, "messages")
    assert rows == expected, (rows, expected)
    forget(spark, lake)
    return {"messages": expected, "seconds": round(seconds, 2), "messagesPerS": expected / seconds, "jvm": jvm}


def semantics_on(spark, fmt: str, data: Path, lake: Path, expected: int, driver_memory: str) -> dict:
    """Ingest with retry marking and the default quality rules, then the semantics stream."""
    from msglake.pipelines.jobs import semantics as semantics_stream

    shutil.rmtree(lake, ignore_errors=True)
    settings = settings_for(lake, data, fmt, "local[2]", driver_memory, semantics=True)
    on = ingest_run(spark, settings, expected)
    log(f"  ingest, semantics on: {on['messagesPerS']:,.0f} msg/s ({on['seconds']:.1f}s)")
    sem = semantics_stream.run(spark, settings, available_now=True)
    events, dead = table_rows(spark, settings, "message_events"), table_rows(spark, settings, "dead_letters")
    assert (events, dead) == (sem.events, sem.dead_letters), ((events, dead), (sem.events, sem.dead_letters))
    assert table_rows(spark, settings, "messages") == expected
    forget(spark, lake)
    total = on["seconds"] + sem.seconds
    log(f"  semantics stream: {sem.seconds:.1f}s, {sem.batches} batch(es), {events:,} events, {dead:,} dead letters")
    return {"ingest": on,
            "semantics": {"seconds": round(sem.seconds, 2), "batches": sem.batches, "events": events,
                          "deadLetters": dead, "messagesPerS": expected / sem.seconds},
            "total": {"seconds": round(total, 2), "messagesPerS": expected / total}}


# --------------------------------------------------------------------------- memory


def _processes() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, resident bytes), from /proc/<pid>/stat."""
    page = os.sysconf("SC_PAGE_SIZE")
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        out[int(name)] = (int(rest[1]), comm, int(rest[21]) * page)
    return out


def _pss(pid: int) -> int:
    """Proportional set size (shared pages split among the processes sharing them), 0 if gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


def _descendants(procs: dict, root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class RssSampler(threading.Thread):
    """Peak RSS of the driver JVM (a child of this process), of the Python workers (the JVM's
    descendants, summed; also their summed PSS, which counts pages forked workers share once)
    and of this process, sampled every 0.2 s."""

    def __init__(self):
        super().__init__(daemon=True, name="rss-sampler")
        self.done = threading.Event()
        self.peak = {"jvm": 0, "pythonWorkers": 0, "pythonWorkersPss": 0, "driverPython": 0}
        self.samples = self.most_workers = 0

    def sample(self) -> dict:
        procs = _processes()
        mine = _descendants(procs, os.getpid())
        jvms = [p for p in mine if procs[p][1] == "java"]
        jvm = max(jvms, key=lambda p: procs[p][2]) if jvms else None
        workers = [p for p in _descendants(procs, jvm) if procs[p][1] != "java"] if jvm else []
        now = {"jvm": procs[jvm][2] if jvm else 0, "pythonWorkers": sum(procs[p][2] for p in workers),
               "pythonWorkersPss": sum(_pss(p) for p in workers), "driverPython": procs[os.getpid()][2]}
        self.most_workers = max(self.most_workers, len(workers))
        return now

    def run(self) -> None:
        while not self.done.is_set():
            for k, v in self.sample().items():
                self.peak[k] = max(self.peak[k], v)
            self.samples += 1
            self.done.wait(SAMPLE_SECONDS)

    def stop(self) -> dict:
        self.done.set()
        self.join()
        return self.peak


def memory_probe(spec: dict) -> dict:
    """One ingest (semantics off) of ``spec['data']`` with ``maxBytesPerTrigger = spec['trigger']``
    in this (fresh) process, the RSS sampled; row counts checked."""
    from msglake.pipelines.session import build_session

    lake = Path(spec["lake"])
    shutil.rmtree(lake, ignore_errors=True)
    settings = settings_for(lake, Path(spec["data"]), spec["format"], "local[2]", spec["driverMemory"],
                            semantics=False, trigger_bytes=spec["trigger"])
    spark = build_session(settings, app_name="msglake-suite-memory")
    sampler = RssSampler()
    before = sampler.sample()  # the JVM started, nothing read yet
    sampler.start()
    run = ingest_run(spark, settings, spec["expected"])
    peak = sampler.stop()
    spark.stop()
    shutil.rmtree(lake, ignore_errors=True)
    mib = lambda b: round(b / (1 << 20), 1)  # noqa: E731
    return {"dataBytes": spec["dataBytes"], "triggerBytes": spec["trigger"],
            "backlogOverTrigger": round(spec["dataBytes"] / spec["trigger"], 2), "ingest": run,
            "jvmBeforeMiB": mib(before["jvm"]), "jvmPeakMiB": mib(peak["jvm"]),
            "pythonWorkersPeakMiB": mib(peak["pythonWorkers"]),
            "pythonWorkersPssPeakMiB": mib(peak["pythonWorkersPss"]), "driverPythonPeakMiB": mib(peak["driverPython"]),
            "pythonWorkersMost": sampler.most_workers, "samples": sampler.samples}


def memory_run(label: str, fmt: str, data: Path, data_bytes: int, expected: int, trigger: int, lake: Path,
               driver_memory: str) -> dict:
    """:func:`memory_probe` in a child process (a fresh JVM: an earlier run's heap would count)."""
    spec = {"format": fmt, "data": str(data), "dataBytes": data_bytes, "expected": expected, "trigger": trigger,
            "lake": str(lake), "driverMemory": driver_memory}
    proc = subprocess.run([sys.executable, __file__, "--memory-probe", json.dumps(spec)], stdout=subprocess.PIPE,
                          text=True)
    found = [line[len(MEMORY_MARK):] for line in proc.stdout.splitlines() if line.startswith(MEMORY_MARK)]
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"memory probe {label} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    out = json.loads(found[-1])
    log(f"  memory {label}: backlog {out['backlogOverTrigger']}x the trigger ({out['ingest']['batches']} batches): "
        f"JVM peak {out['jvmPeakMiB']:,.0f} MiB (after start {out['jvmBeforeMiB']:,.0f}), Python workers "
        f"{out['pythonWorkersPeakMiB']:,.0f} MiB (PSS {out['pythonWorkersPssPeakMiB']:,.0f}), "
        f"driver Python {out['driverPythonPeakMiB']:,.0f} MiB")
    return out


# --------------------------------------------------------------------------- machine and report


def machine() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
               platform.processor())
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    ram = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal")) << 10
    java_bin = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    java = subprocess.run([str(java_bin), "-version"], capture_output=True, text=True).stderr.splitlines()
    versions = {}
    for package in ("pyspark", "delta-spark", "pyarrow", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"cpu": cpu, "cores": os.cpu_count(), "ramGiB": round(ram / (1 << 30), 1),
            "python": platform.python_version(), "java": java[0] if java else None, **versions,
            "os": platform.platform(), "loadAverageAtStart": [round(x, 2) for x in os.getloadavg()]}


def ratios(fr: dict) -> dict:
    """Issue 7's ratios for one format, from the measures that ran (at the largest size where a
    measure has several)."""
    sizes = fr["sizes"]
    small, large = min(sizes, key=int), max(sizes, key=int)
    first, last = sizes[small], sizes[large]
    out = {}
    if "ingest" in last and "ceiling" in last:
        out["ingestOverCeiling"] = last["ingest"]["messagesPerS"] / last["ceiling"]["messagesPerS"]
    # Issue 19's target is set at 4M messages: judged there when that size ran.
    at = str(TARGET_DEFAULTS_SIZE) if str(TARGET_DEFAULTS_SIZE) in sizes else large
    if "defaults" in sizes[at] and "ceiling" in sizes[at]:
        out["defaultsOverCeiling"] = sizes[at]["defaults"]["messagesPerS"] / sizes[at]["ceiling"]["messagesPerS"]
        out["defaultsOverCeilingSize"] = int(at)
    if "decode" in last:
        out["decodeMessagesPerS"] = last["decode"]["messagesPerS"]
        if "rawRead" in last:
            out["decodeOverRawRead"] = last["decode"]["mbPerS"] / last["rawRead"]["mbPerS"]
    if "msglakeOverPeer" in last.get("javaPeer", {}):
        out["decodeOverJavaPeer"] = last["javaPeer"]["msglakeOverPeer"]
        out["decodeOverJavaPeerCheckingCrc"] = last["javaPeer"]["checkedCrc"]["msglakeOverPeer"]
        if "perPassRun" in last["javaPeer"]:  # not in results of runs before 2026-12-03
            out["decodeOverJavaPeerMappingPerPass"] = last["javaPeer"]["perPassRun"]["msglakeOverPeer"]
    if "ingest" in first:
        spread = {n: s["ingest"]["usPerMessage"] / first["ingest"]["usPerMessage"] - 1 for n, s in sizes.items()}
        out.update(costSpread=spread, costSpreadLargest=spread[large], costSpreadWorst=max(spread.values(), key=abs))
    if "masters" in fr:
        out["local2OverLocal1"] = fr["masters"]["local[2]"]["messagesPerS"] / fr["masters"]["local[1]"]["messagesPerS"]
    if "memory" in fr:
        m4, m8 = fr["memory"]["4x"], fr["memory"]["8x"]
        out["memoryPeak8xOver4x"] = m8["jvmPeakMiB"] / m4["jvmPeakMiB"]
        out["workersPeak8xOver4x"] = m8["pythonWorkersPeakMiB"] / m4["pythonWorkersPeakMiB"]
        out["workersPssPeak8xOver4x"] = m8["pythonWorkersPssPeakMiB"] / m4["pythonWorkersPssPeakMiB"]
    return out


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _size_table(fr: dict) -> list[str]:
    """One column per size, one row per measure that ran."""
    sizes = sorted(fr["sizes"], key=int)
    spread = fr["ratios"].get("costSpread", {})
    rows = [
        ("messages (records) / data bytes", "dataBytes",
         lambda s: f"{s['messages']:,} / {s['dataBytes'] / 1e6:,.1f} MB"),
        ("raw read, warm page cache (1 MiB reads)", "rawRead", lambda s: f"{s['rawRead']['mbPerS']:,.0f} MB/s"),
        ("decode only, 1 core, no Spark", "decode",
         lambda s: f"{_n(s['decode']['messagesPerS'])} msg/s, {s['decode']['mbPerS']:,.1f} MB/s"),
        ("decode, RocketMQ MessageDecoder (Java), 1 core", "javaPeer", _peer_cell),
        ("engine ceiling: Parquet -> Delta", "ceiling",
         lambda s: f"{_n(s['ceiling']['messagesPerS'])} msg/s ({s['ceiling']['seconds']:.1f} s)"),
        ("msglake ingest, semantics off", "ingest", lambda s: f"{_n(s['ingest']['messagesPerS'])} msg/s "
         f"({s['ingest']['seconds']:.1f} s, {s['ingest']['batches']} batches)"),
        ("cost per message (spread vs smallest)", "ingest",
         lambda s: f"{s['ingest']['usPerMessage']:.1f} µs ({spread[str(s['size'])] * 100:+.0f} %)"),
        ("ingest / engine ceiling", ("ingest", "ceiling"),
         lambda s: f"{s['ingest']['messagesPerS'] / s['ceiling']['messagesPerS']:.2f}"),
        ("msglake ingest, default settings (retry marking, quality rules)", "defaults",
         lambda s: f"{_n(s['defaults']['messagesPerS'])} msg/s ({s['defaults']['seconds']:.1f} s, "
                   f"{s['defaults']['batches']} batches)"),
        ("ingest with the defaults / engine ceiling", ("defaults", "ceiling"),
         lambda s: f"{s['defaults']['messagesPerS'] / s['ceiling']['messagesPerS']:.2f}"),
        ("decode MB/s / raw read MB/s", ("decode", "rawRead"),
         lambda s: f"{s['decode']['mbPerS'] / s['rawRead']['mbPerS']:.3f}"),
    ]
    out = ["| measure | " + " | ".join(f"{int(n):,} generated" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name, need, cell in rows:
        need = (need,) if isinstance(need, str) else need
        if all(k in fr["sizes"][n] for n in sizes for k in need):
            out.append(f"| {name} | " + " | ".join(cell(fr["sizes"][n]) for n in sizes) + " |")
    return out


def _peer_cell(s: dict) -> str:
    peer = s["javaPeer"]
    if "skipped" in peer:
        return f"skipped: {peer['skipped']}"
    crc, fresh = peer["checkedCrc"], peer.get("perPassRun")  # not in runs before 2026-12-03
    cell = (f"{_n(peer['messagesPerS'])} msg/s, {peer['mbPerS']:,.1f} MB/s; msglake / Java "
            f"{peer['msglakeOverPeer']:.2f}x; Java checking BODYCRC as msglake does: {_n(crc['messagesPerS'])} "
            f"msg/s, msglake / Java {crc['msglakeOverPeer']:.2f}x")
    if fresh:
        cell += (f"; Java mapping the files per pass as msglake does: {_n(fresh['messagesPerS'])} msg/s, "
                 f"msglake / Java {fresh['msglakeOverPeer']:.2f}x")
    return cell


def _smallest_table(fr: dict) -> list[str]:
    first = fr["sizes"][min(fr["sizes"], key=int)]
    out = []
    if "semantics" in fr:
        sem = fr["semantics"]
        if "ingest" in first:
            out.append(f"| ingest, semantics off | {_n(first['ingest']['messagesPerS'])} msg/s "
                       f"({first['ingest']['seconds']:.1f} s) |")
        out += [
            f"| ingest, semantics on (retry marking, default quality rules) | "
            f"{_n(sem['ingest']['messagesPerS'])} msg/s ({sem['ingest']['seconds']:.1f} s) |",
            f"| semantics stream, available-now | {sem['semantics']['seconds']:.1f} s "
            f"({_n(sem['semantics']['messagesPerS'])} msg/s; {sem['semantics']['events']:,} events, "
            f"{sem['semantics']['deadLetters']:,} dead letters) |",
            f"| ingest + semantics stream | {_n(sem['total']['messagesPerS'])} msg/s "
            f"({sem['total']['seconds']:.1f} s) |",
        ]
    if "masters" in fr:
        ms = fr["masters"]
        out.append(f"| ingest local[1] / local[2] | {_n(ms['local[1]']['messagesPerS'])} / "
                   f"{_n(ms['local[2]']['messagesPerS'])} msg/s |")
    for mem in fr.get("memory", {}).values():
        out.append(
            f"| memory, backlog {mem['backlogOverTrigger']}x maxBytesPerTrigger "
            f"({mem['dataBytes'] / 1e6:,.0f} MB / {mem['triggerBytes'] / 1e6:,.1f} MB, {mem['ingest']['batches']} "
            f"batches in {mem['ingest']['seconds']:.0f} s) | JVM peak {mem['jvmPeakMiB']:,.0f} MiB (after start "
            f"{mem['jvmBeforeMiB']:,.0f}), Python workers {mem['pythonWorkersPeakMiB']:,.0f} MiB (PSS "
            f"{mem['pythonWorkersPssPeakMiB']:,.0f}; up to {mem['pythonWorkersMost']} processes), driver Python "
            f"{mem['driverPythonPeakMiB']:,.0f} MiB |")
    return ["| measure | result |", "|---|---|"] + out if out else []


def _ratio_table(fr: dict) -> list[str]:
    r = fr["ratios"]
    sizes = sorted(fr["sizes"], key=int)
    small, large = f"{int(sizes[0]):,}", f"{int(sizes[-1]):,}"
    out = []
    if "ingestOverCeiling" in r:
        out.append(f"| ingest / engine ceiling, msg/s ({large}) | {r['ingestOverCeiling']:.2f} | >= {TARGET_CEILING} | "
                   f"{_verdict(r['ingestOverCeiling'] >= TARGET_CEILING)} |")
    if "defaultsOverCeiling" in r:
        judged = r["defaultsOverCeilingSize"] == TARGET_DEFAULTS_SIZE
        out.append(f"| ingest with the default settings / engine ceiling, msg/s ({r['defaultsOverCeilingSize']:,}) | "
                   f"{r['defaultsOverCeiling']:.2f} | >= {TARGET_CEILING} at {TARGET_DEFAULTS_SIZE:,} (issue 19) | "
                   f"{_verdict(r['defaultsOverCeiling'] >= TARGET_CEILING) if judged else 'not judged at this size'} |")
    if "decodeMessagesPerS" in r:
        out.append(f"| decode msg/s on one core ({large}) | {_n(r['decodeMessagesPerS'])} | >= {TARGET_DECODE:,} | "
                   f"{_verdict(r['decodeMessagesPerS'] >= TARGET_DECODE)} |")
    if "decodeOverJavaPeer" in r:
        out.append(f"| decode vs RocketMQ MessageDecoder (Java), one core ({large}) | {r['decodeOverJavaPeer']:.2f}x | "
                   f">= {TARGET_PEER:.1f}x (issue 18) | {_verdict(r['decodeOverJavaPeer'] >= TARGET_PEER)} |")
        both = r["decodeOverJavaPeerCheckingCrc"]
        out.append(f"| the same, both checking BODYCRC ({large}) | {both:.2f}x | >= {TARGET_PEER:.1f}x (issue 18) | "
                   f"{_verdict(both >= TARGET_PEER)} |")
        fresh = r.get("decodeOverJavaPeerMappingPerPass")
        if fresh is not None:  # beside the target, not judged by it: the target was set against the peer's default
            out.append(f"| the same, Java mapping the files per pass as msglake does ({large}) | {fresh:.2f}x | "
                       f"(for comparison) | |")
    if "decodeOverRawRead" in r:
        out.append(f"| decode MB/s / raw read MB/s ({large}) | {r['decodeOverRawRead']:.3f} | decoding keeps up with "
                   f"the disk (-> 1) | |")
    if "costSpreadWorst" in r and len(sizes) > 1:
        out.append(f"| cost per message, {small} -> {large} (worst size) | {r['costSpreadLargest'] * 100:+.1f} % "
                   f"({r['costSpreadWorst'] * 100:+.1f} %) | flat within {TARGET_FLAT * 100:.0f} % | "
                   f"{_verdict(abs(r['costSpreadWorst']) <= TARGET_FLAT)} |")
    if "local2OverLocal1" in r:
        out.append(f"| local[2] / local[1], ingest msg/s ({small}) | {r['local2OverLocal1']:.2f} | >= {TARGET_CORES} | "
                   f"{_verdict(r['local2OverLocal1'] >= TARGET_CORES)} |")
    if "memoryPeak8xOver4x" in r:
        bound = 1 + TARGET_MEMORY
        ok = max(r["memoryPeak8xOver4x"], r["workersPssPeak8xOver4x"]) <= bound
        out.append(f"| peak memory, backlog 8x / 4x the trigger: JVM RSS; Python workers RSS (PSS) | "
                   f"{r['memoryPeak8xOver4x']:.2f}; {r['workersPeak8xOver4x']:.2f} ({r['workersPssPeak8xOver4x']:.2f})"
                   f" | bounded by the trigger (taken as <= {bound:.2f}) | {_verdict(ok)} |")
    return ["| ratio | value | target (issue 7 unless said) | |", "|---|---|---|---|"] + out if out else []


def markdown(result: dict) -> str:
    m, suite = result["machineDetail"], result["suite"]
    lines = [
        f"# msglake benchmark suite, {result['when']}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ramGiB']} GiB RAM; Python {m['python']}, {m['java']}; "
        f"pyspark {m['pyspark']}, delta-spark {m['delta-spark']}, pyarrow {m['pyarrow']}, numpy {m['numpy']}; "
        f"{m['os']}; load average at start {', '.join(map(str, m['loadAverageAtStart']))}.",
        f"Spark local[2] unless said, driver memory {suite['driverMemory']}; measures: {', '.join(suite['parts'])}; "
        f"suite run {suite['seconds'] / 60:.1f} min{' (--quick)' if suite['quick'] else ''}.",
    ]
    for fmt, fr in result["formats"].items():
        small = f"{int(min(fr['sizes'], key=int)):,}"
        lines += ["", f"## {fmt}", "", *_size_table(fr)]
        table = _smallest_table(fr)
        if table:
            lines += ["", f"At the smallest size ({small} generated):", "", *table]
        table = _ratio_table(fr)
        if table:
            lines += ["", *table]
    lines += [
        "",
        f"Raw read and decode run in this Python process on one core (decode: the fastest of {DECODE_PASSES} "
        "passes after an untimed one); RocketMQ's Java MessageDecoder runs on "
        "the same files in a JVM pinned to one core (-XX:ActiveProcessorCount=1): its fastest of the timed "
        f"passes (at least 3, {java_peer.WORK_MESSAGES:,} messages in all), after untimed passes of as many "
        "messages that warm its JIT; by default its passes all read one mapping of the files made before "
        "them, while msglake maps them in each decode call (the \"mapping per pass\" run does as msglake "
        "does). Spark runs use local[2], both cores. Memory runs are ingests with semantics off, each in a "
        "fresh process (JVM); the 8x backlog is the next size's data with the same maxBytesPerTrigger. Python "
        "workers' RSS is summed over the processes, so pages forked workers share count once per worker; PSS "
        "splits them.",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", help="messages to generate per data set, comma-separated "
                   f"(default {','.join(map(str, DEFAULT_SIZES))}; --quick: {','.join(map(str, QUICK_SIZES))})")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma-separated, of {', '.join(FORMATS)}")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the whole suite")
    p.add_argument("--only", default=",".join(PARTS), help=f"measures to run, comma-separated (default all: "
                   f"{','.join(PARTS)})")
    p.add_argument("--driver-memory", default="6g", help="spark.driver.memory of every session (default 6g)")
    p.add_argument("--memory-probe", help=argparse.SUPPRESS)  # internal: one memory run, in a child process
    args = p.parse_args(argv)
    os.chdir(REPO)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.memory_probe:
        print(MEMORY_MARK + json.dumps(memory_probe(json.loads(args.memory_probe))), flush=True)
        return 0
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    parts = [x.strip() for x in args.only.split(",") if x.strip()]
    for what, given, known in (("--formats", formats, FORMATS), ("--only", parts, PARTS)):
        if not given or set(given) - set(known):
            p.error(f"{what}: {sorted(set(given) - set(known)) or 'nothing'} given; use some of {', '.join(known)}")
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",")}) if args.sizes else list(
        QUICK_SIZES if args.quick else DEFAULT_SIZES)
    warmup = QUICK_WARMUP if args.quick else WARMUP
    dm = args.driver_memory
    result = {"suite": {"sizes": sizes, "formats": formats, "parts": parts, "quick": args.quick,
                        "driverMemory": dm}, "machineDetail": machine(), "formats": {}}
    log(f"suite: formats {formats}, sizes {sizes}, measures {parts}; machine {result['machineDetail']['cpu']}, "
        f"{result['machineDetail']['cores']} cores, load {result['machineDetail']['loadAverageAtStart']}")

    # 1-2: data, Parquet, raw read and decode (no Spark)
    data = {}
    for fmt in formats:
        fr = result["formats"][fmt] = {"sizes": {}}
        warm = data_dir(fmt, f"warmup-{warmup}")
        data[(fmt, "warmup")] = (warm, ensure_data(fmt, warm, warmup))
        if "decode" in parts:
            decode_pass(fmt, warm)  # untimed: the codec's first use (imports, caches) is not its speed
        for n in sizes:
            base = base_dir(fmt, n)
            log(f"{fmt} {n:,}: data set under {base.relative_to(REPO)}")
            path = data_dir(fmt, n)
            expected = ensure_data(fmt, path, n)
            data[(fmt, n)] = (path, expected)
            s = fr["sizes"][str(n)] = {"size": n, "messages": expected, "dataBytes": data_bytes(fmt, path)}
            if "ceiling" in parts:
                s["parquetBytes"] = ensure_parquet(fmt, path, base / "parquet", expected)
            if "read" in parts:
                s["rawRead"] = raw_read(fmt, path)
                log(f"  raw read: {s['rawRead']['bytes'] / 1e6:,.1f} MB at {s['rawRead']['mbPerS']:,.0f} MB/s "
                    "(warm cache)")
            if "decode" in parts:
                s["decode"] = decode(fmt, path, expected)
                log(f"  decode: {s['decode']['messagesPerS']:,.0f} msg/s, {s['decode']['mbPerS']:,.1f} MB/s")
                if fmt == PEER_FORMAT:
                    s["javaPeer"] = peer_decode(path, expected, s["decode"])

    # 6: memory, each run in a fresh process (before this process starts its own JVM)
    for fmt in formats if "memory" in parts else ():
        fr = result["formats"][fmt]
        path, expected = data[(fmt, sizes[0])]
        first_bytes = fr["sizes"][str(sizes[0])]["dataBytes"]
        trigger = first_bytes // 4
        fr["memory"] = {"4x": memory_run("4x", fmt, path, first_bytes, expected, trigger, path.parent / "lake-mem", dm)}
        # 8x: the same trigger over a backlog twice as large (the next size), else a trigger half as large.
        bigger = [n for n in sizes if fr["sizes"][str(n)]["dataBytes"] >= 1.8 * first_bytes]
        if bigger:
            path8, expected8 = data[(fmt, bigger[0])]
            bytes8 = fr["sizes"][str(bigger[0])]["dataBytes"]
        else:
            path8, expected8, bytes8, trigger = path, expected, first_bytes, first_bytes // 8
        fr["memory"]["8x"] = memory_run("8x", fmt, path8, bytes8, expected8, trigger, path8.parent / "lake-mem", dm)

    # 3-5: one session per master setting
    masters = [m for m, wanted in (("local[2]", {"ceiling", "ingest", "defaults", "semantics", "masters"}),
                                   ("local[1]", {"masters"})) if wanted & set(parts)]
    session_lake = REPO / "bench-data" / "suite-session"
    for master in masters:
        from msglake.pipelines.session import build_session

        spark = build_session(settings_for(session_lake, session_lake, formats[0], master, dm, semantics=False),
                              app_name=f"msglake-suite-{master}", master=master)
        for fmt in formats:
            fr = result["formats"][fmt]
            warm, warm_n = data[(fmt, "warmup")]
            log(f"{fmt}, {master}: warm-up ingest and Parquet -> Delta write of {warm_n:,} messages (untimed)")
            tag = master.replace("[", "").replace("]", "")  # no glob characters in a path Spark reads
            run_ingest(spark, fmt, warm, warm.parent / f"lake-{tag}", warm_n, master, dm)
            if master == "local[2]" and {"defaults", "semantics"} & set(parts):
                run_ingest(spark, fmt, warm, warm.parent / f"lake-{tag}", warm_n, master, dm, semantics=True)
            if "ceiling" in parts and master == "local[2]":  # the ceiling is measured in local[2] only
                ensure_parquet(fmt, warm, warm.parent / "parquet", warm_n)
                engine_ceiling(spark, fmt, warm.parent / "parquet", warm.parent / f"lake-ceiling-{tag}", warm_n, dm)
            path, expected = data[(fmt, sizes[0])]
            if master == "local[1]":
                one = run_ingest(spark, fmt, path, path.parent / "lake-local1", expected, master, dm)
                fr["masters"]["local[1]"] = one
                log(f"  {sizes[0]:,}: ingest local[1] {one['messagesPerS']:,.0f} msg/s ({one['seconds']:.1f}s)")
                continue
            for n in sizes:
                path_n, expected_n = data[(fmt, n)]
                s = fr["sizes"][str(n)]
                if "ceiling" in parts:
                    s["ceiling"] = engine_ceiling(spark, fmt, path_n.parent / "parquet",
                                                  path_n.parent / "lake-ceiling", expected_n, dm)
                    log(f"  {n:,}: engine ceiling {s['ceiling']['messagesPerS']:,.0f} msg/s "
                        f"({s['ceiling']['seconds']:.1f}s)")
                if "ingest" in parts or ("masters" in parts and n == sizes[0]):
                    s["ingest"] = run_ingest(spark, fmt, path_n, path_n.parent / "lake-off", expected_n, master, dm)
                    log(f"  {n:,}: ingest, semantics off {s['ingest']['messagesPerS']:,.0f} msg/s "
                        f"({s['ingest']['seconds']:.1f}s, {s['ingest']['batches']} batches)")
                if "defaults" in parts and master == "local[2]":
                    s["defaults"] = run_ingest(spark, fmt, path_n, path_n.parent / "lake-defaults", expected_n, master,
                                               dm, semantics=True)
                    log(f"  {n:,}: ingest, default settings {s['defaults']['messagesPerS']:,.0f} msg/s "
                        f"({s['defaults']['seconds']:.1f}s, {s['defaults']['batches']} batches; "
                        f"{line(s['defaults']['jvm'])})")
            if "masters" in parts:
                fr["masters"] = {"local[2]": fr["sizes"][str(sizes[0])]["ingest"]}
            if "semantics" in parts:
                fr["semantics"] = semantics_on(spark, fmt, path, path.parent / "lake-on", expected, dm)
        spark.stop()

    for fr in result["formats"].values():
        fr["ratios"] = ratios(fr)
    result["suite"]["seconds"] = round(time.monotonic() - STARTED, 1)
    path = write("suite", result)
    result["when"] = json.loads(path.read_text())["when"]
    md = markdown(result)
    path.with_suffix(".md").write_text(md)
    print(f"wrote {path.with_suffix('.md')}\n\n{md}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
