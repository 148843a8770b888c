"""``msglake history ID``: one message's story across topics, without evaluating the whole lake.

The records of the message are found by id (``messageId``, ``uniqueId``, the producer's own
UNIQ_KEY or ``traceId``; Delta's file statistics on those columns skip the other files, more
so after ``msglake optimize``), with the RocketMQ ``%RETRY%``/``%DLQ%`` records that name
one of them as their origin. Only those are evaluated, with the replay's own rounds
(``pipelines.jobs.evaluate``), the consumer events that name them and the offsets of their
topics: a copy's fate depends on nothing else, except in a topic with overflow limits or
head-only expiry, where it depends on the rest of its queue. When the story reaches such a
topic (where it is stored, or a dead-letter topic it can be routed to), the whole of that
topic and of every topic that can dead-letter into it is evaluated too, and the answer says so.
The result is, copy for copy, what ``msglake replay --as-of T`` gives for this message.
"""
from __future__ import annotations

import datetime as dt
import operator
import time
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession, functions as F

from msglake.errors import InputError, LakeError
from msglake.pipelines.io.once import log_version
from msglake.pipelines.jobs.evaluate import evaluate
from msglake.pipelines.jobs.replay import default_as_of, lake_table
from msglake.pipelines.settings import Settings, policy_dicts
from msglake.schemas import MESSAGES_TABLE
from msglake.transforms.lifecycle import (
    DEFAULT_MAX_HOPS,
    ORIGIN_ID,
    any_coupled,
    conform,
    conform_events,
    event_key,
    is_coupled_topic,
    is_lineage_topic,
    stored_copies,
    topic_arrivals,
)
from msglake.transforms.semantics import Policies, policy_for

#: More stored records than this for one id is not one message's story: ask for a narrower one.
MAX_RECORDS = 1000


@dataclass
class Story:
    """The copies of the messages an id names, each with its state changes, as of ``as_of``."""

    wanted: str
    as_of: dt.datetime
    #: ``message_states`` rows (dicts) of every copy, stored ones first, each with ``events``.
    copies: list[dict]
    #: Topics evaluated whole because a copy's fate there depends on its queue.
    whole_topics: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def messages(self) -> list[list[dict]]:
        """The copies grouped by message: a stored record with no parent here, and what it became."""
        by_id = {c["rowId"]: c for c in self.copies}

        def root(c):
            while c["parentRowId"] in by_id:
                c = by_id[c["parentRowId"]]
            return c["rowId"]

        groups: dict = {}
        for c in self.copies:
            groups.setdefault(root(c), []).append(c)
        return list(groups.values())


def _named(wanted: str, columns: list[str]) -> Column:
    ids = [c for c in ("messageId", "uniqueId", "producerUniqueId", "traceId") if c in columns]
    return reduce(operator.or_, [F.col(c) == wanted for c in ids])


def _targets(policies: Policies, topics: set[str]) -> set[str]:
    """``topics`` and every dead-letter topic their copies can be routed to, transitively."""
    seen, todo = set(), list(topics)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        target = policy_for(policies, t).get("deadLetterTopic")
        if target:
            todo.append(target)
    return seen


def _upstream(policies: Policies, lake_topics: list[str], sinks: set[str]) -> set[str]:
    """Every lake topic whose copies can be dead-lettered into one of ``sinks``."""
    return {t for t in lake_topics if _targets(policies, {t}) & sinks}


def small_lookup(policies: Policies) -> bool:
    """Whether every lookup under ``policies`` is a small job (``session.SMALL_JOB_ROWS``): a story
    is its message's own records and the copies they make, unless it reaches a topic that is
    evaluated whole (overflow limits, head-only expiry), and no policy here makes one."""
    return not any_coupled(policies)


def history(spark: SparkSession, settings: Settings, wanted: str, *, as_of: dt.datetime | None = None,
            topic: str | None = None, partition: int | None = None, max_hops: int = DEFAULT_MAX_HOPS,
            policies: Policies | None = None) -> Story:
    """The story of the message(s) ``wanted`` names (see the module docstring).

    ``policies``: topic pattern -> policy fields (default: the settings'); a ``msglake serve``
    answering for a client gives the client's.
    """
    started = time.monotonic()
    path = settings.lake.table_path(MESSAGES_TABLE.name)
    version = log_version(path)
    if version is None:
        raise LakeError(f"no messages table in {path}: ingest first")
    # The whole lookup reads this version, whatever is appended meanwhile (see _arrivals).
    messages = spark.read.format("delta").option("versionAsOf", version).load(path)
    policies = policy_dicts(settings.policies) if policies is None else policies
    columns = messages.columns  # traceId and producerUniqueId may be missing in a lake not made by ingest
    messages = conform(messages)
    found = messages.where(_named(wanted, columns))
    if topic is not None:
        found = found.where(F.col("topic") == topic)
    if partition is not None:
        found = found.where(F.col("partition") == partition)
    seeds = found.select("topic", "partition", "messageId", "uniqueId", "producerUniqueId",
                         F.col("properties")[ORIGIN_ID].alias("origin")).limit(MAX_RECORDS + 1).collect()
    where = "".join(f" {k} {v!r}" for k, v in (("in topic", topic), ("partition", partition)) if v is not None)
    if not seeds:
        raise InputError(f"no stored message has messageId, uniqueId or traceId {wanted!r}{where}")
    if len(seeds) > MAX_RECORDS:
        raise InputError(f"{wanted!r} names more than {MAX_RECORDS:,} stored records{where}: narrow it with "
                         "--topic/--partition")
    own = _records(messages, seeds).cache()
    try:  # a server answers lookup after lookup: the found records are not kept cached
        as_of = as_of or default_as_of(messages)
        mine = stored_copies(own, policies).select("rowId", "uniqueId").collect()
        own_rows, keys = {r["rowId"] for r in mine}, {r["uniqueId"] for r in mine}

        involved = _targets(policies, {r["topic"] for r in own.select("topic").distinct().collect()})
        coupled = {t for t in involved if is_coupled_topic(policies, t)}
        whole: set[str] = set()
        related = own
        if coupled:
            lake_topics = [r["topic"] for r in messages.select("topic").distinct().collect()]
            whole = _upstream(policies, lake_topics, coupled) | coupled
            related = (own.unionByName(messages.where(F.col("topic").isin(sorted(whole))))
                       .dropDuplicates(list(MESSAGES_TABLE.key)))
            involved |= _targets(policies, whole)

        events = lake_table(spark, settings, "consumer_events")
        if events is not None:
            events = conform_events(events).where(F.col("topic").isin(sorted(involved)))
            if not whole:  # in a coupled topic the others' consumption moves the queue too
                events = events.where(event_key().isin(sorted(keys | {s["messageId"] for s in seeds})))
        offsets = lake_table(spark, settings, "consumer_offsets")
        if offsets is not None:
            offsets = offsets.where(F.col("topic").isin(sorted(involved)))
        arrivals = _arrivals(messages, path, version, involved)
        result = evaluate(related, policies, as_of, consumer_events=events, consumer_offsets=offsets,
                          max_hops=max_hops, topics=arrivals)
        copies = _descendants(result.states.where(F.col("uniqueId").isin(sorted(keys))).collect(), own_rows)
        by_copy: dict[str, list[dict]] = {}
        for e in (result.events.where(F.col("rowId").isin([c["rowId"] for c in copies])).orderBy("rowId", "seq")
                  .collect()):
            by_copy.setdefault(e["rowId"], []).append(_utc(e.asDict(recursive=True)))
        for c in copies:
            c["events"] = by_copy.get(c["rowId"], [])
        return Story(wanted, as_of, copies, sorted(whole), time.monotonic() - started)
    finally:
        own.unpersist()


#: Per ``messages`` table (its path): the version and, for each topic a lookup needed, its first
#: store time in microseconds (None: the topic has no message), for :func:`_arrivals`.
_FIRST_STORED: dict[str, tuple[int, dict[str, int | None]]] = {}


def _arrivals(messages: DataFrame, path: str, version: int, topics: set[str]) -> DataFrame:
    """``topic, since`` of ``topics`` (``transforms.lifecycle.topic_arrivals``) in ``messages``, the
    table at ``path`` as of ``version``.

    Finding them reads every message of those topics (0.3-0.5 s of a lookup on a 5M-message lake,
    warm), and they change only with the table: a session remembers them per table version, so a
    lookup of the same version (a ``msglake serve``, a notebook) reads only the topics none before
    it needed. Rows the driver holds, so the rounds read no table for them either."""
    known_version, known = _FIRST_STORED.get(path, (None, {}))
    if known_version != version:
        known = {}
    missing = sorted(topics - known.keys())
    if missing:
        found = {r["topic"]: r["since"] for r in topic_arrivals(messages.where(F.col("topic").isin(missing)))
                 .select("topic", F.unix_micros("since").alias("since")).collect()}
        known = {**known, **{t: found.get(t) for t in missing}}
        _FIRST_STORED[path] = (version, known)
    rows = [(t, known[t]) for t in sorted(topics) if known[t] is not None]
    return (messages.sparkSession.createDataFrame(rows, "topic string, since bigint")
            .select("topic", F.timestamp_micros("since").alias("since")))


def _records(messages: DataFrame, seeds: list) -> DataFrame:
    """The stored records of the seeds' messages: themselves, those carrying their broker ids
    (RocketMQ UNIQ_KEY) and the retry records naming one of them as origin."""
    exact = F.lit(False)
    for s in seeds:
        exact = exact | ((F.col("topic") == s["topic"]) & (F.col("partition") == s["partition"])
                         & (F.col("messageId") == s["messageId"]))
    unique = sorted({v for s in seeds for v in (s["uniqueId"], s["producerUniqueId"]) if v})
    origins = sorted({v for s in seeds for v in (s["messageId"], s["origin"]) if v})
    by_unique = F.col("uniqueId").isin(unique) | F.col("producerUniqueId").isin(unique) if unique else F.lit(False)
    by_origin = F.col("messageId").isin(sorted({s["origin"] for s in seeds if s["origin"]}))
    retries = messages.where(is_lineage_topic(F.col("topic")) & F.col("properties")[ORIGIN_ID].isin(origins))
    return messages.where(exact | by_unique | by_origin).unionByName(retries).dropDuplicates(list(MESSAGES_TABLE.key))


def _utc(v):
    """``v`` with its times zone-aware (the session's time zone is UTC; Spark hands back naive times)."""
    if isinstance(v, dt.datetime):
        return v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)
    if isinstance(v, dict):
        return {k: _utc(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_utc(x) for x in v]
    return v


def _descendants(states: list, roots: set[str]) -> list[dict]:
    """The copies among ``states`` that are one of ``roots`` or derived from one, in story order."""
    rows = [_utc(r.asDict(recursive=True)) for r in states]
    by_id = {r["rowId"]: r for r in rows}

    def rooted(r):
        while r["rowId"] not in roots and r["parentRowId"] in by_id:
            r = by_id[r["parentRowId"]]
        return r["rowId"] in roots

    return sorted((r for r in rows if rooted(r)), key=lambda r: (r["storeTimestamp"], r["hop"], r["topic"], r["rowId"]))


def _t(v: dt.datetime | None) -> str:
    return "-" if v is None else v.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def render_text(story: Story) -> list[str]:
    """The story as lines for a terminal: per message, per copy, its events and x-death history."""
    groups = story.messages
    out = [f"history of {story.wanted!r} as of {_t(story.as_of)}: {len(groups)} message(s), "
           f"{len(story.copies)} cop{'y' if len(story.copies) == 1 else 'ies'} ({story.seconds:.1f}s)"]
    if story.whole_topics:
        out.append(f"  evaluated whole (overflow or head-only expiry): {', '.join(story.whole_topics)}")
    for n, copies in enumerate(groups, 1):
        first = copies[0]
        out.append(f"message {n}: {first['uniqueId']} stored in {first['topic']} partition {first['partition']}")
        for c in copies:
            where = (f"{c['segment']} @ {c['segmentPosition']}, queue offset {c['queueOffset']}"
                     if c["segment"] is not None else "dead-letter copy made by the rules")
            out.append(f"  {c['topic']}/{c['partition']} hop {c['hop']}: {where}")
            for e in c["events"]:
                why = f" ({e['reason']})" if e.get("reason") else ""
                out.append(f"    {_t(e['time'])}  {e['event']}{why}")
            to = f" -> {c['deadLetterTopic']}" if c["deadLetterTopic"] else ""
            why = f" ({c['stateReason']})" if c["stateReason"] else ""
            consumed = f", consumed {_t(c['consumedAt'])}" if c["consumedAt"] else ""
            out.append(f"    state at T: {c['state']}{why}{to} since {_t(c['stateTime'])}{consumed}")
            for d in c["deathHistory"] or []:
                keys = ",".join(d["routingKeys"] or [])
                out.append(f"    x-death: {d['queue']} {d['reason']} x{d['count']} first {_t(d['time'])}"
                           f" exchange {d['exchange'] or '-'} routing keys [{keys}]"
                           + (f" original expiration {d['originalExpiration']}" if d["originalExpiration"] else ""))
    return out


def render_json(story: Story) -> list[str]:
    """The story as one JSON document: ``{id, asOf, wholeTopics, messages: [{copies: [...]}]}``."""
    import orjson

    doc = {"id": story.wanted, "asOf": story.as_of, "wholeTopics": story.whole_topics,
           "messages": [{"copies": copies} for copies in story.messages]}
    return [orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_UTC_Z).decode()]
