"""The lake's documented SQL views, registered with its tables in every session the factory builds.

- ``v_messages``: the curated messages: broker-internal copies (RocketMQ system topics) and
  producer retries (``retryOf`` set) left out, so one published message is one row.
- ``v_trace``: every hop of a ``traceId``: each stored record carrying it (retry and DLQ
  topics, system copies included, flagged) and the dead-lettered copies the latest replay
  derived (joined on the engine's message key: the producer's own UNIQ_KEY, else uniqueId,
  else messageId), in store order, with ``latencyMs`` from the previous hop (the first hop: from
  ``bornTimestamp``).
- ``v_dead_letters``: the dead-lettered copies of the latest evaluation, one row per
  ``deathHistory`` entry (``deathIndex`` 0 = the latest death).
- ``v_backlog``: per topic and partition, copies by state at the latest evaluation, and how
  many ready ones no consumer has taken yet.

"The latest evaluation" is the newest ``asOf`` a replay wrote; a lake only the streaming job
(``msglake semantics``) filled has ``asOf`` null, which the views then use.
"""
from __future__ import annotations

import logging

LOG = logging.getLogger(__name__)

LATEST = "asOf <=> (SELECT max(asOf) FROM {table})"

V_MESSAGES = """
SELECT * FROM messages WHERE NOT coalesce(systemCopy, false) AND retryOf IS NULL
"""

_TRACE_STORED = """
SELECT traceId, coalesce(producerUniqueId, uniqueId, messageId) AS uniqueId, topic, partition, queueOffset, messageId, sourceFormat,
       coalesce(systemCopy, false) AS systemCopy, retryOf IS NOT NULL AS producerRetry, CAST(NULL AS INT) AS hop,
       bornTimestamp, storeTimestamp
FROM messages WHERE traceId IS NOT NULL
"""

_TRACE_DERIVED = """
SELECT t.traceId, s.uniqueId, s.topic, s.partition, s.queueOffset, CAST(NULL AS STRING), CAST(NULL AS STRING),
       false, false, s.hop, CAST(NULL AS TIMESTAMP), s.storeTimestamp
FROM message_states s
JOIN (SELECT DISTINCT traceId, coalesce(producerUniqueId, uniqueId, messageId) AS uniqueId FROM messages WHERE traceId IS NOT NULL) t
  ON s.uniqueId = t.uniqueId
WHERE s.hop > 0 AND s.segment IS NULL AND s.{latest}
"""

V_TRACE = """
SELECT *, row_number() OVER w AS hopIndex,
       (unix_micros(storeTimestamp) - unix_micros(coalesce(lag(storeTimestamp) OVER w, bornTimestamp))) / 1000.0
         AS latencyMs
FROM ({hops}) WINDOW w AS (PARTITION BY traceId ORDER BY storeTimestamp, topic, queueOffset)
"""

V_DEAD_LETTERS = """
SELECT d.asOf, d.uniqueId, d.topic AS deadLetterTopic, d.partition, d.hop, d.storeTimestamp AS deadLetteredAt,
       d.state, d.firstDeathQueue, d.firstDeathReason, d.firstDeathExchange, h.deathIndex,
       h.death.queue AS queue, h.death.reason AS reason, h.death.count AS count, h.death.time AS firstTime,
       h.death.exchange AS exchange, h.death.routingKeys AS routingKeys,
       h.death.originalExpiration AS originalExpiration
FROM dead_letters d LATERAL VIEW posexplode(d.deathHistory) h AS deathIndex, death
WHERE d.{latest}
"""

V_BACKLOG = """
SELECT asOf, topic, partition, count(*) AS copies,
       count_if(state = 'scheduled') AS scheduled, count_if(state = 'ready') AS ready,
       count_if(state = 'ready' AND consumedAt IS NULL) AS readyUnconsumed, count(consumedAt) AS consumed,
       count_if(state = 'expired') AS expired, count_if(state = 'dead_lettered') AS deadLettered,
       count_if(state = 'dropped') AS dropped
FROM message_states WHERE {latest}
GROUP BY asOf, topic, partition
"""


def view_sql(tables: set[str]) -> dict[str, str]:
    """The views whose tables exist, name -> SELECT."""
    views = {}
    if "messages" in tables:
        views["v_messages"] = V_MESSAGES
        hops = _TRACE_STORED
        if "message_states" in tables:
            hops += " UNION ALL " + _TRACE_DERIVED.format(latest=LATEST.format(table="message_states"))
        views["v_trace"] = V_TRACE.format(hops=hops)
    if "dead_letters" in tables:
        views["v_dead_letters"] = V_DEAD_LETTERS.format(latest=LATEST.format(table="dead_letters"))
    if "message_states" in tables:
        views["v_backlog"] = V_BACKLOG.format(latest=LATEST.format(table="message_states"))
    return views


def register_views(spark, tables: set[str]) -> list[str]:
    """(Re)create the views over the registered tables; returns the names of those created.

    A table an older msglake wrote may lack a column a view reads (the next job that opens the
    table adds it): that view is left out with a warning instead of failing the session.
    """
    from pyspark.errors import AnalysisException

    made = []
    for name, sql in view_sql(tables).items():
        try:
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{name}` AS {sql}")
            made.append(name)
        except AnalysisException as e:
            spark.catalog.dropTempView(name)
            LOG.warning("view %s not registered: %s", name, str(e).splitlines()[0][:200])
    return made
