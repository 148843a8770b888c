"""msglake semantics: the streaming job's log equals a replay at its watermark, exactly once across runs."""
from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import functions as F

from msglake.samples.nsq import generate
from msglake.pipelines import settings as S
from msglake.pipelines.jobs.ingest import ingest
from msglake.pipelines.jobs.semantics import run
from tests.conftest import make_settings
from msglake.pipelines.jobs.evaluate import evaluate

pytestmark = pytest.mark.slow

POLICIES = {
    # The sample stores one message per millisecond (400 ms in all): TTLs in tens of ms.
    "orders": {"messageTtlMs": 100, "deadLetterTopic": "orders.dlq", "deadLetterRoutingKey": "late"},
    "orders.dlq": {"messageTtlMs": 40, "deadLetterTopic": "orders.parked"},
    "orders.parked": {"messageTtlMs": 30, "deadLetterTopic": "orders"},          # back to orders: a cycle
    "payments": {"messageTtlMs": 80, "deadLetterTopic": "nowhere"},             # missing target
    "audit.*": {"messageTtlMs": 30},                                            # expires, no DLT
}
EVENT_COLS = ("rowId", "hop", "topic", "event", "us", "seq", "state", "reason")
COPY_COLS = ("rowId", "parentRowId", "hop", "topic", "store", "firstDeathQueue", "routingKey", "history")


def events(df, until_us):
    return sorted(tuple(r) for r in df.select(*EVENT_COLS[:4], F.unix_micros("time").alias("us"), *EVENT_COLS[5:])
                  .where(F.col("us") <= until_us).collect())


def copies(df, until_us):
    return sorted(tuple(r) for r in df.select(
        "rowId", "parentRowId", "hop", "topic", F.unix_micros("storeTimestamp").alias("store"), "firstDeathQueue",
        "routingKey", F.to_json("deathHistory").alias("history")).where(F.col("store") <= until_us).collect())


def test_stream_log_equals_a_replay_at_its_watermark(spark, tmp_path):
    generate(str(tmp_path / "nsq"), 400, bad_inputs=False, max_bytes_per_file=32 << 10)
    doc = make_settings(tmp_path / "lake", tmp_path / "nsq").model_dump()
    doc["policies"] = POLICIES
    settings = S.from_dict(doc, "test")
    ingest(spark, settings)
    summary = run(spark, settings, available_now=True, lateness_seconds=0)
    assert summary.batches >= 1 and summary.watermark is not None
    w_us = int(summary.watermark.timestamp() * 1_000_000)
    lake = settings.lake.table_path
    log = spark.read.format("delta").load(lake("message_events"))
    dead = spark.read.format("delta").load(lake("dead_letters"))
    assert log.where("asOf IS NOT NULL").count() == 0

    messages = spark.read.format("delta").load(lake("messages"))
    policies = {k: v.model_dump() for k, v in settings.policies.items()}
    replay = evaluate(messages, policies, summary.watermark)
    got_events, want_events = events(log, w_us), events(replay.events, w_us)
    kinds = {(e[3], e[7]) for e in want_events}
    # The data exercises delays, expiry without a DLT, dead-lettering, chains, cycles and missing targets.
    assert {("scheduled", None), ("expired", "expired"), ("dead_lettered", "expired"), ("dropped", "cycle"),
            ("dropped", "missing_target")} <= kinds
    assert len(want_events) > 1000 and got_events == want_events
    assert copies(dead, w_us) == copies(replay.dead_letters, w_us) != []
    assert all(h >= 1 for h in (r.hop for r in dead.select("hop").collect()))

    # A second run has nothing new to do: nothing logged twice.
    before = (log.count(), dead.count())
    again = run(spark, settings, available_now=True, lateness_seconds=0)
    assert again.events == 0 and (log.count(), dead.count()) == before


# -- the stream's log after any sequence of micro-batches equals a replay at its watermark ---------------------
from hypothesis import HealthCheck, Phase, example, given, settings as hsettings, strategies as st  # noqa: E402

import datetime as dt  # noqa: E402

from msglake.pipelines.jobs.semantics import SemanticsSummary, Stream, step  # noqa: E402

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
RAW = ("topic string, partition int, segment string, segmentPosition bigint, messageId string, uniqueId string, "
       "queueOffset bigint, storeTimestamp timestamp, delayTime bigint, deliveryCount int, "
       "properties map<string,string>, bodySize int")


def at(ms):
    return T0 + dt.timedelta(milliseconds=ms)


# A topic's expiry at the head only waits for older copies that left by any fate but overflow,
# and the stream no longer holds a copy dropped by overflow: a topic sets one or the other.
_limits = st.fixed_dictionaries({"deadLetterTopic": st.sampled_from(["a", "b", "c"])}, optional={
    "maxLength": st.integers(0, 3), "maxLengthBytes": st.integers(0, 40),
    "overflow": st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"])})
_head = st.fixed_dictionaries({"expiryAtHeadOnly": st.just(True)})
policy = st.tuples(st.fixed_dictionaries({}, optional={
    "messageTtlMs": st.integers(0, 150),
    "deadLetterTopic": st.sampled_from(["a", "b", "c", "gone"]),
    "deadLetterRoutingKey": st.just("dead"),
    "maxDeliveries": st.integers(0, 2),
}), st.one_of(st.just({}), _limits, _head)).map(lambda p: {**p[0], **p[1]})
# (topic, store ms, expiration, delay, deliveries, size, retry of an earlier message)
message = st.tuples(st.sampled_from(["a", "b", "%RETRY%g"]), st.integers(0, 300),
                    st.one_of(st.none(), st.integers(0, 120)), st.one_of(st.none(), st.integers(0, 80)),
                    st.integers(0, 3), st.integers(1, 20), st.integers(0, 5))
# (message, topic, kind, ms after the message's delivery time): consumers racing the broker's clocks
event = st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "c"]),
                  st.sampled_from(["acked", "rejected", "requeued", "delivered"]), st.integers(0, 200))
# (topic, time ms, lag): the group's offset at that time, ``lag`` messages behind the newest deliverable
snapshot = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 400), st.integers(0, 2))
scenario = st.tuples(st.dictionaries(st.sampled_from(["a", "b", "c"]), policy, max_size=3),
                     st.lists(message, min_size=1, max_size=6), st.lists(event, max_size=6),
                     st.lists(snapshot, max_size=3))


def _scenarios(scenarios):
    """Independent scenarios in one lake: topic ``x`` of scenario i is ``x.si``."""
    policies, msgs, events, offsets = {}, [], [], []
    for i, (pol, ms, evs, snaps) in enumerate(scenarios):
        ns = f".s{i}"
        for topic, p in pol.items():
            policies[topic + ns] = {**p, **({"deadLetterTopic": p["deadLetterTopic"] + ns}
                                            if "deadLetterTopic" in p else {})}
        mine = []
        retries = [m[0].startswith("%RETRY%") and m[6] < j for j, m in enumerate(ms)]
        for j, (topic, store, expiration, delay, deliveries, size, retry_of) in enumerate(ms):
            props = {} if expiration is None else {"expiration": str(expiration)}
            retry = retries[j]
            uid = f"u{retry_of if retry else j}{ns}"
            if retry and not retries[retry_of] and ms[retry_of][1] < store:
                # as the broker writes it (after the first record, whose offset msgId it names);
                # half of these carry another UNIQ_KEY (a batch member's retry has the batch's),
                # so only the origin links them
                props["ORIGIN_MESSAGE_ID"] = f"m{retry_of}{ns}"
                uid = f"batch{ns}" if j % 2 else uid
            topic = topic if retry or not topic.startswith("%") else "a"
            mine.append([topic + ns, 0, "seg", 1000 * i + j, f"m{j}{ns}", uid, None, at(store), delay, deliveries,
                         props, size])
        # queue offsets in store order per topic, as a broker assigns them
        for topic in {m[0] for m in mine}:
            for k, m in enumerate(sorted((m for m in mine if m[0] == topic), key=lambda m: (m[7], m[3]))):
                m[6] = k
        msgs += [tuple(m) for m in mine]
        # A consumer acts on a delivered message: its events come after the message's delivery time.
        for j, topic, kind, after in evs:
            if j < len(ms):
                _, store, _, delay, *_ = ms[j]
                events.append((topic + ns, mine[j][5], kind, at(store + (delay or 0) + after)))
        for topic, t, lag in snaps:
            # a group consumes in queue order, each message once it is deliverable
            queue = sorted((m for m in mine if m[0] == topic + ns), key=lambda m: m[6])
            done = next((k for k, m in enumerate(queue)
                         if m[7] + dt.timedelta(milliseconds=m[8] or 0) > at(t)), len(queue))
            offsets.append((topic + ns, 0, max(0, done - lag), at(t)))
    return policies, msgs, events, offsets


def test_stream_after_any_micro_batches_equals_a_replay_at_its_watermark(spark, tmp_path_factory):
    seen: set = set()

    @hsettings(max_examples=2, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(scenario, min_size=60, max_size=60), st.lists(st.integers(1, 330), min_size=1, max_size=2),
           st.integers(0, 60))
    # The explicit cases, as two scenarios of one lake (a run of the stream and a replay each costs
    # ~25 s; the batches of one do not change the other's):
    # - overflow into a dead-letter topic, whatever the random draws reach: a drops its head into
    #   b, a copy the first batch evaluated (a@2: the watermark 14 - 12) dropped by an arrival of
    #   the second;
    # - a dead-letter copy still pending in a coupled topic (a dead-letters into itself, with an
    #   overflow limit), evaluated again with its partition by a later batch: once, not twice.
    @example(scenarios=[({"a": {"maxLength": 1, "overflow": "drop-head", "deadLetterTopic": "b"}, "b": {}},
                         [("a", 2, None, None, 0, 5, 0), ("a", 20, None, None, 0, 5, 0),
                          ("b", 14, None, None, 0, 5, 0)], [], []),
                        ({"a": {"maxDeliveries": 0, "messageTtlMs": 39, "deadLetterTopic": "a", "maxLengthBytes": 21,
                                "overflow": "reject-publish-dlx", "maxLength": 3}, "b": {}, "c": {"deadLetterTopic": "c"}},
                         [("b", 193, 3, None, 1, 7, 3), ("a", 199, 65, 60, 2, 15, 4), ("b", 40, None, 50, 2, 20, 2),
                          ("a", 150, None, None, 3, 12, 2), ("a", 134, None, 48, 2, 6, 5), ("a", 81, None, None, 1, 13, 1)],
                         [(2, "a", "acked", 43), (2, "c", "rejected", 135), (0, "c", "rejected", 200),
                          (3, "c", "requeued", 19), (4, "b", "acked", 128), (4, "b", "requeued", 48)],
                         [("b", 161, 0)])], cuts=[15, 161], lateness_ms=12)
    def check(scenarios, cuts, lateness_ms):
        seen.update(_stream_equals_replay(spark, tmp_path_factory.mktemp("stream-eq"), scenarios, cuts,
                                          lateness_ms))

    check()
    # Over the examples, the scenarios reach the fates the rules know.
    missing = {("consumed", None), ("expired", "expired"), ("dead_lettered", "expired"), ("dead_lettered", "maxlen"),
               ("dead_lettered", "rejected"), ("dead_lettered", "delivery_limit"), ("dropped", "cycle"),
               ("dropped", "missing_target")} - seen
    assert not missing, f"no scenario reached {missing} (seen: {sorted(seen, key=str)})"


def _explain(got, want, scenarios, cuts, lateness_ms) -> str:
    """The first scenario whose events differ, and how (or the events logged more often on one side)."""
    if set(got) == set(want):
        extra = (Counter(got) - Counter(want)) + (Counter(want) - Counter(got))
        return (f"the same events, different counts (cuts {cuts}, lateness {lateness_ms} ms): stream "
                f"{len(got)}, replay {len(want)}; " + "; ".join(
                    f"{e}: stream {got.count(e)}, replay {want.count(e)}" for e in sorted(extra)[:10]))
    ns = min({e[2].rsplit(".", 1)[1] for e in set(got) ^ set(want)})
    lines = [f"scenario {ns}: {scenarios[int(ns[1:])]}, cuts {cuts}, lateness {lateness_ms} ms"]
    lines += [f"  stream only: {e}" for e in sorted(set(got) - set(want)) if e[2].endswith("." + ns)]
    lines += [f"  replay only: {e}" for e in sorted(set(want) - set(got)) if e[2].endswith("." + ns)]
    return "\n".join(lines)


def _stream_equals_replay(spark, lake, scenarios, cuts, lateness_ms) -> set:
    """Run the stream's micro-batches over the scenarios, compare with a replay; the (event, reason)s seen."""
    doc = make_settings(lake).model_dump()
    raw_policies, msgs, evs, snaps = _scenarios(scenarios)
    doc["policies"] = raw_policies
    settings = S.from_dict(doc, "test")
    policies = {k: v.model_dump() for k, v in settings.policies.items()}
    path = settings.lake.table_path
    tables = {"message_events": path("message_events"), "dead_letters": path("dead_letters")}
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas.semantics import DEAD_LETTERS_TABLE, MESSAGE_EVENTS_TABLE
    for spec in (MESSAGE_EVENTS_TABLE, DEAD_LETTERS_TABLE):
        ensure_table(spark, settings, spec)
    stream = Stream(spark, settings, dt.timedelta(milliseconds=lateness_ms), 6, tables, SemanticsSummary())

    # Micro-batches by arrival (= store) time; consumer input loaded as the watermark reaches it.
    bounds = sorted(set(cuts)) + [10_000]
    loaded_ev = loaded_off = 0
    events_sorted = sorted(evs, key=lambda e: e[3])
    offsets_sorted = sorted(snaps, key=lambda o: o[3])
    lo, stepped = -1, 0
    for batch_id, hi in enumerate(bounds):
        batch = [m for m in msgs if at(lo) < m[7] <= at(hi)]
        lo = hi
        if not batch:
            continue
        stepped += 1
        w = max(m[7] for m in batch) - dt.timedelta(milliseconds=lateness_ms)
        new_ev = [e for e in events_sorted[loaded_ev:] if e[3] <= w]
        new_off = [o for o in offsets_sorted[loaded_off:] if o[3] <= w]
        loaded_ev += len(new_ev)
        loaded_off += len(new_off)
        if new_ev:
            spark.createDataFrame(new_ev, "topic string, messageId string, event string, time timestamp") \
                .write.format("delta").mode("append").save(path("consumer_events"))
        if new_off:
            spark.createDataFrame(new_off, "topic string, queue int, offset bigint, snapshotTime timestamp") \
                .write.format("delta").mode("append").save(path("consumer_offsets"))
        # the job reads its batches from the messages table, where earlier ones are too
        rows = spark.createDataFrame(batch, RAW)
        rows.write.format("delta").mode("append").save(path("messages"))
        step(stream, rows, batch_id)
    w = stream.summary.watermark
    assert w is not None and stream.summary.late == 0
    assert stream.held_batches == stepped - 1  # each batch after the first took the set the one before wrote

    messages = spark.createDataFrame(msgs, RAW)
    ev = spark.createDataFrame(evs, "topic string, messageId string, event string, time timestamp") if evs else None
    off = spark.createDataFrame(snaps, "topic string, queue int, offset bigint, snapshotTime timestamp") \
        if snaps else None
    replay = evaluate(messages, policies, w, consumer_events=ev, consumer_offsets=off, max_hops=6)
    w_us = int(w.timestamp() * 1_000_000)
    log = spark.read.format("delta").load(path("message_events"))
    got, want = events(log, w_us), events(replay.events, w_us)
    assert got == want, _explain(got, want, scenarios, cuts, lateness_ms)
    dead = spark.read.format("delta").load(path("dead_letters"))
    assert copies(dead, w_us) == copies(replay.dead_letters, w_us)
    # what the batches report is what they wrote
    assert (stream.summary.events, stream.summary.dead_letters) == (log.count(), dead.count())
    pending = spark.read.format("delta").load(stream.pending_path).where("kind = 'copy'")
    assert stream.summary.pending == pending.count()  # the last batch's, not yet the dormant ones
    return {(e[3], e[7]) for e in want}


def test_messages_stored_by_a_passed_watermark_are_counted_late(spark, tmp_path):
    """A message that arrives after the watermark passed its store time is evaluated and counted
    late; a broker-internal copy or a producer retry that does so is neither."""
    settings = make_settings(tmp_path / "lake")
    path = settings.lake.table_path
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas.semantics import DEAD_LETTERS_TABLE, MESSAGE_EVENTS_TABLE
    tables = {spec.name: ensure_table(spark, settings, spec) for spec in (MESSAGE_EVENTS_TABLE, DEAD_LETTERS_TABLE)}
    stream = Stream(spark, settings, dt.timedelta(0), 6, tables, SemanticsSummary())
    schema = RAW + ", systemCopy boolean, retryOf struct<partition:int,segment:string,segmentPosition:bigint>"

    def row(position, store_ms, system=False, retry=None):
        return ("a", 0, "s", position, f"m{position}", f"u{position}", position, at(store_ms), None, 0, {}, 5,
                system, retry)

    batches = [[row(1, 10), row(2, 20)],  # the watermark moves to 20 ms
               [row(3, 30), row(4, 15), row(5, 15, system=True), row(6, 12, retry=(0, "s", 1))]]
    for batch_id, batch in enumerate(batches):
        rows = spark.createDataFrame(batch, schema)
        rows.write.format("delta").mode("append").option("mergeSchema", "true").save(path("messages"))
        step(stream, rows, batch_id)
    assert (stream.summary.batches, stream.summary.late, stream.summary.watermark) == (2, 1, at(30))

    # Spark runs batch 1 again after a crash before its checkpoint commit: a restarted stream
    # (new writers, which find the batch's commits) adds nothing to its tables. (Batch 1 made no
    # dead letters, and an empty append makes no commit: the redone one may, with no rows.)
    from msglake.pipelines.io.once import log_version

    def state():
        return ([spark.read.format("delta").load(path(t)).count() for t in ("message_events", "dead_letters")],
                log_version(stream.pending_path))

    before = state()
    step(Stream(spark, settings, dt.timedelta(0), 6, tables, SemanticsSummary()), rows, 1)
    assert state() == before and before[0][0] > 0


def test_a_batch_takes_the_pending_set_its_run_wrote_only_while_the_table_holds_it(spark, tmp_path):
    """A stream keeps the pending set its last batch wrote, and its next batch starts from that
    instead of reading the table, only while the table is at the version that write made: after
    another run's batch, it reads the table. Its log still equals a replay (a stale set would
    log the other run's state changes again and lose the copies it left pending)."""
    doc = make_settings(tmp_path / "lake").model_dump()
    doc["policies"] = {"a": {"messageTtlMs": 50}}
    settings = S.from_dict(doc, "test")
    path = settings.lake.table_path
    from msglake.pipelines.io.catalog import ensure_table
    from msglake.schemas.semantics import DEAD_LETTERS_TABLE, MESSAGE_EVENTS_TABLE
    tables = {spec.name: ensure_table(spark, settings, spec) for spec in (MESSAGE_EVENTS_TABLE, DEAD_LETTERS_TABLE)}

    def new_stream():
        return Stream(spark, settings, dt.timedelta(0), 6, tables, SemanticsSummary())

    def row(i, store_ms):
        return ("a", 0, "s", i, f"m{i}", f"u{i}", i, at(store_ms), None, 0, {}, 5)

    def held_plan(stream):
        """The held set's inferred conditions (as text) and partitions."""
        plan = stream.held.copies._jdf.queryExecution()
        return plan.optimizedPlan().constraints().toString(), plan.toRdd().getNumPartitions()

    first, other = new_stream(), new_stream()
    runs = [(first, [row(1, 10), row(2, 40)]), (first, [row(3, 70)]), (first, [row(4, 100)]),
            (other, [row(5, 130), row(6, 160)]), (first, [row(7, 190)]), (first, [row(8, 220)])]
    everything, plans = [], []
    # A streaming query hands each batch over in a session of its own, with its own settings.
    batches_session = spark.newSession()
    for batch_id, (stream, batch) in enumerate(runs):
        everything += batch
        rows = batches_session.createDataFrame(batch, RAW)
        rows.write.format("delta").mode("append").save(path("messages"))
        step(stream, rows, batch_id)
        if batch_id == 4:
            assert first.held_batches == 2  # the table had moved on: read
        if stream is first and batch_id >= 1:
            plans.append(held_plan(first))
    assert (first.held_batches, other.held_batches) == (3, 0)
    # The held set carries no batch's conditions (its watermark's times) into the next batch, nor
    # its partitions: both would pile up batch after batch (planning grew until the driver ran out
    # of memory).
    parallelism = spark.sparkContext.defaultParallelism
    assert all(T0.strftime("%Y-%m-%d") not in text and parts <= parallelism for text, parts in plans), plans

    w = first.summary.watermark
    policies = {k: v.model_dump() for k, v in settings.policies.items()}
    replay = evaluate(spark.createDataFrame(everything, RAW), policies, w)
    w_us = int(w.timestamp() * 1_000_000)
    got = events(spark.read.format("delta").load(path("message_events")), w_us)
    assert got == events(replay.events, w_us) and ("expired", "expired") in {(e[3], e[7]) for e in got}


def test_a_copy_waiting_for_a_consumer_is_not_rewritten_and_wakes_when_named(spark, tmp_path):
    """A ready copy with nothing due (no TTL, no limit on its topic) is dormant: the batches after
    the one that stored it neither read nor rewrite it, until a consumer event naming it, an
    offset snapshot past it or a retry record of its message arrives; the log still equals a
    replay. Each scenario: the copy stored in batch 0 (at 10 ms), the input that wakes it timed
    between the two batches, batch 1 at 200 ms."""
    quiet = ("a", 10, None, None, 0, 5, 0)
    later = ("a", 200, None, None, 0, 5, 0)
    scenarios = [
        ({}, [quiet, later], [(0, "a", "acked", 90)], []),                                    # an ack
        ({"a": {"deadLetterTopic": "c"}}, [quiet, later, ("c", 5, None, None, 0, 5, 0)],
         [(0, "a", "rejected", 90)], []),                                                     # a rejection
        ({}, [quiet, later], [], [("a", 150, 0)]),                                            # an offset snapshot
        ({}, [quiet, ("%RETRY%g", 200, None, None, 0, 5, 0)], [], []),                        # a retry record
        ({}, [quiet, later], [], []),                                                         # nothing: sleeps on
    ]
    seen = _stream_equals_replay(spark, tmp_path / "lake", scenarios, [50], 0)
    assert {("consumed", None), ("dead_lettered", "rejected")} <= seen

    from msglake.pipelines.jobs.semantics import DORMANT, WOKEN

    table = spark.read.format("delta").load(str(tmp_path / "lake" / "_checkpoints" / DORMANT))
    rows = {(r["kind"], r["topic"], r["batch"]) for r in table.select("kind", "topic", "batch").collect()}
    woken = table.where(F.col("kind") == WOKEN).count()
    # batch 0 put each scenario's first copy to sleep; batch 1 woke the four that were named
    # (the chain's, taken over by its retry record, does not sleep again) and left the fifth
    assert {("copy", f"a.s{i}", 0) for i in range(5)} <= rows and woken == 4
    pending = spark.read.format("delta").load(str(tmp_path / "lake" / "_checkpoints" / "semantics-pending"))
    assert pending.where("kind = 'copy' AND topic = 'a.s4' AND storeTimestamp < '2026-11-01 00:00:00.1'").count() == 0

    # The pending set deleted without the dormant copies (a start over by half): refused.
    import shutil

    from msglake.errors import LakeError

    shutil.rmtree(tmp_path / "lake" / "_checkpoints" / "semantics-pending")
    with pytest.raises(LakeError, match="delete .* semantics-pending and semantics-dormant together"):
        run(spark, make_settings(tmp_path / "lake"), available_now=True, lateness_seconds=0)
