"""The rounds of the semantics engine: fate the copies, derive the copies their deaths make, repeat.

The rules are ``msglake.transforms.lifecycle`` (pure column expressions); this module runs
them until the set of copies stops changing: at most ``max_hops + 1`` rounds, each a few
Spark jobs, with the lineage cut between rounds. ``msglake replay`` evaluates every stored
message (:func:`evaluate`); each micro-batch of ``msglake semantics`` evaluates the copies
still pending plus the new messages (:func:`evaluate_copies`), with the same code.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F

from msglake.transforms.lifecycle import (
    DEFAULT_MAX_HOPS,
    ROW,
    base_rows,
    copy_states,
    coupled,
    dead_letter_copies,
    events_by_message,
    fates,
    offset_consumption,
    state_events,
    topic_arrivals,
    version,
)

Persist = Callable[[DataFrame], DataFrame]


def local_checkpoint(df: DataFrame) -> DataFrame:
    return df.localCheckpoint(eager=False)


def distinct_in_one_task(df: DataFrame) -> DataFrame:
    """The distinct rows of ``df``, deduplicated in one task: without the shuffle a ``distinct()``
    plans (a Spark job of its own). For frames a broadcast join takes, which go whole to the
    driver anyway."""
    return df.coalesce(1).distinct()


def broadcast_distinct(df: DataFrame) -> DataFrame:
    """:func:`distinct_in_one_task`, as the small side of a broadcast join."""
    return F.broadcast(distinct_in_one_task(df))


def kept_width(spark) -> int:
    """The most partitions a frame the rounds keep has: the session's parallelism."""
    return max(spark.sparkContext.defaultParallelism, int(spark.conf.get("spark.sql.shuffle.partitions")))


@dataclass
class Evaluation:
    """What an evaluation found, as lazy DataFrames over one cached result."""

    as_of: object
    #: Every copy with its state at ``as_of`` (``message_states``).
    states: DataFrame
    #: The copies with hop >= 1 (``dead_letters``).
    dead_letters: DataFrame
    #: State changes up to ``as_of`` (``message_events``).
    events: DataFrame
    #: Rounds run, and whether the set of copies stopped changing within them.
    rounds: int
    converged: bool
    #: Of those, the simple rounds (new copies alone, :func:`evaluate_copies`).
    simple: int
    #: Every copy with its fate columns (``transforms.lifecycle.fates``): what the stream keeps.
    fated: DataFrame


def evaluate(messages: DataFrame, policies: Mapping[str, Mapping], as_of, consumer_events: DataFrame | None = None,
             consumer_offsets: DataFrame | None = None, max_hops: int = DEFAULT_MAX_HOPS,
             persist: Persist = local_checkpoint, topics: DataFrame | None = None,
             simple_rounds: bool = True) -> Evaluation:
    """States of every copy of ``messages`` at ``as_of`` (a ``datetime``), with dead letters and events.

    ``policies``: topic pattern -> policy fields (``TopicPolicy.model_dump()``).
    ``consumer_events``: ``consumer_events`` rows (topic, messageId, event, time).
    ``consumer_offsets``: ``consumer_offsets`` rows (topic, queue, offset, snapshotTime).
    ``persist`` cuts the lineage between rounds (a local checkpoint by default).
    ``topics``: when each topic got its first message (default: from ``messages``; give it when
    ``messages`` is a part of the lake).
    ``simple_rounds``: False runs every round as a general one (:func:`evaluate_copies`): the
    reference the simple rounds are tested against.
    """
    base = offset_consumption(base_rows(messages, policies, as_of), consumer_offsets, as_of)
    topics = topic_arrivals(messages) if topics is None else topics
    return evaluate_copies(base, policies, as_of, topics, consumer_events, max_hops, persist, simple_rounds)


def _signature(copies: DataFrame, is_coupled: Column) -> tuple[int, int, int]:
    """(copies, a hash of their versions, how many are stored records or in coupled topics), one job."""
    row = copies.select(
        F.count(F.lit(1)).alias("n"), F.sum(F.col("v") % 1_000_000_007).alias("h"),
        F.count(F.when(F.col("stored") | is_coupled, 1)).alias("entangled"),
    ).first()
    return row["n"], row["h"] or 0, row["entangled"]


def evaluate_copies(base: DataFrame, policies: Mapping[str, Mapping], as_of, topics: DataFrame,
                    consumer_events: DataFrame | None = None, max_hops: int = DEFAULT_MAX_HOPS,
                    persist: Persist = local_checkpoint, simple_rounds: bool = True) -> Evaluation:
    """:func:`evaluate` from copies (``transforms.lifecycle.ROW`` columns) instead of messages.

    ``topics``: ``topic, since`` (``transforms.lifecycle.topic_arrivals``). The first round
    evaluates every copy of ``base``; later rounds only the copies that are new or changed,
    and the partitions of coupled topics (``transforms.lifecycle.coupled``) they enter.
    """
    # What a round keeps is a union of what the rounds before it kept, so the partitions add up:
    # a general round's copies and delta each hold the last round's partitions and more, and
    # doubled round after round (a stream batch of 85 messages, seven rounds: stages of 297 ->
    # 595 -> 1,192 -> 2,375 tasks, 178 s). Each kept frame is coalesced to the session's
    # parallelism first (a merge of partitions, no shuffle; never more partitions than it had).
    width, keep = kept_width(base.sparkSession), persist

    def persist(df: DataFrame) -> DataFrame:
        return keep(df.coalesce(width))

    base = persist(base.select(*ROW))
    topics = persist(topics)
    by_message = events_by_message(consumer_events, as_of)
    events = None if by_message is None else persist(by_message)
    is_coupled = coupled(policies)

    def evaluate_rows(rows: DataFrame) -> DataFrame:
        return fates(rows.select(*ROW), policies, as_of, events, topics, max_hops)

    # Round 1 evaluates every copy of base (the bulk of the work, done once). Later rounds
    # keep it and re-evaluate into a small ``delta`` only the copies that are new or changed,
    # and every copy of the coupled partitions they enter or leave; ``replaced`` holds the
    # round-1 rows that ``delta`` supersedes.
    first = persist(evaluate_rows(base))
    columns = first.columns
    first_copies = persist(dead_letter_copies(first, base, policies).withColumn("v", version()))
    delta, replaced = first.limit(0), base.select("rowId").limit(0)

    def reevaluate(copies: DataFrame, previous: DataFrame | None) -> None:
        nonlocal delta, replaced
        if previous is None:
            added, gone = copies, copies.limit(0)
        else:
            added = persist(copies.join(previous.select("rowId", "v"), ["rowId", "v"], "left_anti"))
            gone = persist(previous.join(copies.select("rowId", "v"), ["rowId", "v"], "left_anti"))
        touched = broadcast_distinct(added.unionByName(gone).where(is_coupled).select("topic", "partition"))
        copy_ids = F.broadcast(copies.select("rowId"))
        made, again = F.lit(False).alias("_base"), F.lit(True).alias("_base")
        redo = persist(
            added.drop("v").where(~is_coupled).select("*", made)
            # a stored record whose chained version went away is itself again
            .unionByName(base.join(F.broadcast(gone.where("stored").select("rowId")), "rowId", "left_semi")
                         .join(copy_ids, "rowId", "left_anti").where(~is_coupled).select("*", again))
            .unionByName(base.where(is_coupled).join(touched, ["topic", "partition"], "left_semi")
                         .join(copy_ids, "rowId", "left_anti").select("*", again))
            .unionByName(copies.drop("v").where(is_coupled).join(touched, ["topic", "partition"], "left_semi")
                         .select("*", made))
        )
        dirty = broadcast_distinct(redo.select("rowId").unionByName(gone.select("rowId")))
        # The rows of ``first`` that redo supersedes: the base copies it evaluates again, and
        # stored records taking over a history. (Not ``stored`` alone: a stream batch's base
        # also holds dead-letter copies still pending, which were then fated twice.) Deduplicated
        # in one task: the later rounds broadcast it whole.
        replaced = persist(distinct_in_one_task(
            replaced.unionByName(redo.where(F.col("stored") | F.col("_base")).select("rowId"))))
        delta = persist(delta.join(dirty, "rowId", "left_anti").select(*columns)
                        .unionByName(evaluate_rows(redo).select(*columns)))

    # While every new copy is a made copy (not a stored record taking over a history) in a
    # topic without coupling, nothing evaluated so far can change: such a round only
    # evaluates the new copies and derives theirs (a made copy never has a next stored
    # record, so no stored row is relinked). The general round below diffs every copy
    # against the previous round; it is needed from the first round whose new copies are
    # stored records or enter a coupled topic, and then for every later round.
    copies, previous = first_copies, None
    n, h, entangled = _signature(copies, is_coupled)
    signature, frontier = (n, h), copies
    rounds, simple, converged, general = 1, 0, n == 0, not simple_rounds
    while not converged:
        rounds += 1
        if not general and entangled == 0:
            simple += 1
            evaluated = persist(evaluate_rows(frontier))
            delta = delta.unionByName(evaluated.select(*columns))
            # no stored record to relink (see above): an empty base keeps the full one unread
            frontier = persist(dead_letter_copies(evaluated, base.limit(0), policies).withColumn("v", version()))
            previous, copies = copies, copies.unionByName(frontier)
            n, h, entangled = _signature(frontier, is_coupled)
            converged = n == 0
            if not converged and rounds > max_hops:
                # give the last copies their states, and stop
                delta = delta.unionByName(persist(evaluate_rows(frontier)).select(*columns))
                break
            continue
        if previous is not None and not general:
            signature = _signature(copies, is_coupled)[:2]  # all copies, grown by the simple rounds
        general = True
        reevaluate(copies, previous)
        previous = copies
        copies = persist(
            first_copies.join(F.broadcast(replaced.withColumnRenamed("rowId", "parentRowId")), "parentRowId",
                              "left_anti")
            .unionByName(dead_letter_copies(delta, base, policies).withColumn("v", version()))
        )
        n, h, _ = _signature(copies, is_coupled)
        converged = (n, h) == signature
        signature = (n, h)
        if not converged and rounds > max_hops:
            reevaluate(copies, previous)  # give the last copies their states, and stop
            break
    fated = first.join(F.broadcast(replaced), "rowId", "left_anti").unionByName(delta)
    states = copy_states(fated, as_of)
    return Evaluation(as_of=as_of, states=states, dead_letters=states.where(F.col("hop") >= 1),
                      events=state_events(fated, as_of), rounds=rounds, converged=converged, simple=simple,
                      fated=fated)
