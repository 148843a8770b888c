"""The demo job (``msglake demo``, ``make demo``): sample data of both brokers, ingested, replayed,
checked and queried, end to end on the settings' sources."""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from msglake.pipelines.settings import Settings

#: What the demo shows through Spark SQL: (title, statement); a statement over a table the lake
#: does not have is left out.
QUERIES = (
    ("rows per broker and topic (one table for every broker)",
     "SELECT sourceFormat, topic, count(DISTINCT partition) AS partitions, count(*) AS messages, "
     "sum(CAST(systemCopy AS INT)) AS system_copies, count(retryOf) AS producer_retries "
     "FROM messages GROUP BY sourceFormat, topic ORDER BY sourceFormat, topic"),
    ("a few messages of topic orders from each broker",
     "SELECT sourceFormat, partition, queueOffset, messageId, tags, messageType, delayTime, storeTimestamp, "
     "bodySize, CASE WHEN is_valid_utf8(cast(body AS STRING)) THEN substr(cast(body AS STRING), 1, 20) "
     "ELSE concat('0x', hex(substr(body, 1, 8)), '...') END AS body FROM (SELECT *, row_number() OVER "
     "(PARTITION BY sourceFormat ORDER BY partition, queueOffset) AS n FROM messages "
     "WHERE topic = 'orders' AND tags IS NOT NULL) WHERE n <= 4 ORDER BY sourceFormat, n"),
    ("quarantine by reason",
     "SELECT sourceFormat, substr(reason, 1, 60) AS reason, count(*) AS records, sum(recordLength) AS bytes "
     "FROM quarantine GROUP BY 1, 2 ORDER BY 1, 3 DESC"),
    ("a RocketMQ message's x-death history (retried by its consumer group, then dead-lettered)",
     "SELECT topic, hop, state, stateReason, transform(deathHistory, d -> concat(d.queue, ' ', d.reason, ' x', "
     "d.count)) AS history FROM message_states WHERE uniqueId = (SELECT min(uniqueId) FROM message_states "
     "WHERE startswith(topic, '%DLQ%')) ORDER BY hop"),
    ("RocketMQ consumer lag (latest consumer_offsets snapshot)",
     "SELECT `group`, topic, queue, offset, queueMaxOffset, queueMaxOffset - offset AS lag FROM consumer_offsets "
     "WHERE snapshotTime = (SELECT max(snapshotTime) FROM consumer_offsets) ORDER BY topic, queue"),
)
#: The sample `msglake sql` query the demo ends with.
SAMPLE = ("SELECT topic, sum(copies) AS copies, sum(ready) AS ready, sum(expired) AS expired, "
          "sum(deadLettered) AS dead_lettered FROM v_backlog WHERE asOf = (SELECT max(asOf) FROM v_backlog) "
          "GROUP BY topic ORDER BY copies DESC")


def prepare_data(settings: Settings, messages: int, fresh: bool, say: Callable[[str], None]) -> None:
    """Sample data in every source folder that has none (all of it and the lake anew when ``fresh``)."""
    from msglake.samples import generate

    if fresh:
        for src in settings.sources:
            shutil.rmtree(src.path, ignore_errors=True)
        shutil.rmtree(settings.lake.root, ignore_errors=True)
    for src in settings.sources:
        if os.path.isdir(src.path):
            say(f"[1/5] using the sample data already in {os.path.abspath(src.path)} (--fresh to regenerate)")
            continue
        say(f"[1/5] generating {messages:,} sample messages ({src.format}) in {os.path.abspath(src.path)}")
        truth = generate(src.format, src.path, messages)
        say(f"      {len(truth.messages):,} messages, {len(truth.quarantined)} corrupt records among them")


def run_demo(spark, settings: Settings, say: Callable[[str], None]) -> int:
    """Ingest every source, replay the semantics, report on quality and query the lake; the exit status."""
    from msglake.pipelines.jobs.ingest import ingest
    from msglake.pipelines.jobs.quality import run_quality
    from msglake.pipelines.jobs.replay import run_replay

    say("[2/5] ingesting (available-now) ...")
    tables: dict[str, str] = {}
    balanced = True
    for src in settings.sources:
        summary = ingest(spark, settings, src.name)
        for line in summary.lines():
            say(line)
        tables.update(summary.tables)
        balanced &= summary.balanced
    say("[3/5] delivery semantics (msglake replay) as of the newest message, with the settings' policies")
    replayed = run_replay(spark, settings)
    tables.update(replayed.outputs)
    for line in replayed.lines()[:-len(replayed.outputs) - 1]:
        say(line)
    say("[4/5] what the lake holds, through Spark SQL")
    for title, sql in QUERIES:
        if any(t in sql and t not in tables for t in ("consumer_offsets", "message_states")):
            continue
        say(f"\n-- {title}: {sql}")
        say(spark.sql(sql)._jdf.showString(50, 0, False))
    say("[5/5] data-quality report on messages (msglake quality)")
    quality = run_quality(spark, settings, "messages")
    for line in quality.lines()[:1] + [line for line in quality.lines()[1:] if not line.startswith("  ok")]:
        say(line)
    say("\ntables (Delta; in Python: spark = msglake.build_session(msglake.load_settings())):")
    for name, path in tables.items():
        say(f"  {name:<16} {path}")
    say(f"\nquality report (open in a browser, works offline): {quality.html_path}")
    say(f"sample query (views: v_messages, v_trace, v_dead_letters, v_backlog):\n  msglake sql \"{SAMPLE}\"")
    say(spark.sql(SAMPLE)._jdf.showString(20, 0, False))
    return 0 if balanced and not quality.errors else 1
