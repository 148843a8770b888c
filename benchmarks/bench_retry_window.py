"""A micro-batch whose producer retries' first copies are in an earlier batch: what its retry
decision costs with the first copies' rows kept by the sink, and with them read from the table.

    .venv/bin/python benchmarks/bench_retry_window.py [--messages 1000000] [--retries 20] [--pairs 2]

A streaming trigger that holds a retry of a message an earlier trigger wrote (a producer resends
after its timeout, seconds later) decides it against that first copy. Batch 0 is the suite's NSQ
set (``suite.data_dir``), batch 1 a small queue of ``--retries`` copies of messages of batch 0,
stored a second after them. Each pair runs both ways on a fresh lake, in turn: the sink keeping
its batches' first-copy rows (``first_copies.FirstCopies.wrote`` with rows), and without them
(every repeat's rows read from the table's window). Prints batch 1's time, and its retry
decision's, each way, and the memory the kept rows take; checks both marked the same rows.
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import time

import suite as S  # benchmarks/ is on sys.path when a script in it runs

FMT = "nsq-ext"


def retry_copies(spark, messages_path: str, out, n: int) -> None:
    """``n`` messages of the table written again as a producer resends them, a second later."""
    from pyspark.sql import functions as F

    from msglake.samples.nsq_writer import NsqQueueWriter

    rows = (spark.read.format("delta").load(messages_path).where("traceId IS NOT NULL AND retryOf IS NULL")
            .orderBy(F.col("storeTimestamp").desc()).limit(n)
            .select("topic", "traceId", "bornHost", "body", "storeTimestamp").collect())
    by_topic: dict[str, list] = {}
    for r in rows:
        by_topic.setdefault(r.topic, []).append(r)
    for topic, copies in by_topic.items():
        with NsqQueueWriter(str(out), topic, 0) as w:
            for r in copies:
                stored = r.storeTimestamp.replace(tzinfo=dt.timezone.utc) + dt.timedelta(seconds=1)
                w.put(bytes(r.body), header={"##trace_id": r.traceId, "bornHost": r.bornHost},
                      timestamp_ns=int(stored.timestamp() * 1e9))


def run(spark, data, lake, retries: int, keep: bool) -> dict:
    """Batch 0 (``data``) then batch 1 (its retries) through one sink, on a fresh lake."""
    from msglake.pipelines.io import sinks
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.pipelines.io.source import DriverReader
    from msglake.schemas import LAKE_TABLES

    shutil.rmtree(lake, ignore_errors=True)
    settings = S.settings_for(lake, data, FMT, "local[2]", "6g", semantics=True)
    paths = {spec.name: ensure_table(spark, settings, spec) for spec in LAKE_TABLES}
    sink = sinks.DeltaSink("bench", paths["messages"], paths["quarantine"], dedup_watermark_seconds=600)
    if not keep:
        sink._first_copies = lambda *a: None
    decided = []
    original = sink._retries

    def timed(*a):
        t = time.monotonic()
        try:
            return original(*a)
        finally:
            decided.append(time.monotonic() - t)

    sink._retries = timed

    def batch(folder, batch_id: int) -> float:
        options = {"format": FMT, "path": str(folder), "storeHost": "10.0.0.1:4150"}
        # The source makes the keys, as the ingest job's does (the driver's reader leaves them out).
        df = spark.read.format("msglake").options(**options, dedupKeys="true").load()
        t = time.monotonic()
        sink(df, batch_id, DriverReader(options).map)
        return time.monotonic() - t

    batch(data, 0)
    kept = [p.rows for p in sink.firsts.pieces if p.rows is not None]
    kept_rows, kept_bytes = sum(len(t) for t in kept), sum(t.get_total_buffer_size() for t in kept)
    again = lake / "retries"
    retry_copies(spark, paths["messages"], again, retries)
    seconds = batch(again, 1)
    marked = (spark.read.format("delta").load(paths["messages"]).where("retryOf IS NOT NULL")
              .selectExpr("count(*) AS n", "sum(hash(dedupKey, retryOf)) AS h").first())
    S.forget(spark, lake)
    return {"seconds": seconds, "decision": decided[-1], "rowReads": sink.firsts.row_reads,
            "marked": (marked.n, marked.h), "keptRows": kept_rows, "keptBytes": kept_bytes}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="messages of batch 0 (default 1,000,000)")
    p.add_argument("--retries", type=int, default=20, help="retries in batch 1 (default 20)")
    p.add_argument("--pairs", type=int, default=2, help="runs of each way, alternated (default 2)")
    a = p.parse_args()
    from msglake.pipelines.session import build_session

    data = S.data_dir(FMT, a.messages)
    S.ensure_data(FMT, data, a.messages)
    lake = S.REPO / "bench-data" / "retry-window-lake"
    spark = build_session(S.settings_for(lake, data, FMT, "local[2]", "6g", semantics=True), app_name="bench-retry",
                          master="local[2]")
    run(spark, data, lake, a.retries, True)  # warm-up
    out: dict[str, list] = {"kept": [], "read": []}
    for i in range(a.pairs):
        for keep in ((True, False) if i % 2 == 0 else (False, True)):
            r = run(spark, data, lake, a.retries, keep)
            out["kept" if keep else "read"].append(r)
            print(f"{'rows kept' if keep else 'rows read':9}: batch 1 {r['seconds']:.2f} s, retry decision "
                  f"{r['decision']:.2f} s, table reads for rows {r['rowReads']}, marked {r['marked'][0]:,}; batch 0's "
                  f"first-copy rows kept: {r['keptRows']:,} ({r['keptBytes'] / 1e6:.0f} MB)", flush=True)
    marks = {r["marked"] for rs in out.values() for r in rs}
    assert len(marks) == 1, marks
    for way, rs in out.items():
        print(f"{way}: batch 1 {sorted(round(r['seconds'], 2) for r in rs)} s, decision "
              f"{sorted(round(r['decision'], 2) for r in rs)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
