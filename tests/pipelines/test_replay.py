"""msglake replay / load-events: the README's worked example, determinism, lake tables, bad input lines."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from pyspark.sql import functions as F

from msglake.pipelines import cli
from tests.conftest import assert_rows

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "replay")


def example_args(tmp_path, as_of, out):
    return ["replay", "--lake", str(tmp_path / "lake"), "--messages", f"{EXAMPLE}/messages.jsonl",
            "--policies", f"{EXAMPLE}/policies.yaml", "--events", f"{EXAMPLE}/events.jsonl", "--as-of", as_of,
            "--json-out", str(out)]


def states(out):
    with open(os.path.join(out, "message_states.jsonl")) as f:
        return {(r["uniqueId"], r["topic"]): r for r in map(json.loads, f)}


def test_worked_example_at_two_times_and_byte_identical_output(spark, tmp_path, capsys):
    assert cli.main(example_args(tmp_path, "2026-11-01T10:00:20Z", tmp_path / "early")) == 0
    early = states(tmp_path / "early")
    assert {k: (r["state"], r["stateReason"]) for k, r in early.items()} == {
        ("o-1", "orders"): ("ready", None),                    # acked only at 10:00:30
        ("o-2", "orders"): ("dead_lettered", "expired"),       # its own expiration: 10:00:15
        ("o-2", "orders.dlq"): ("ready", None),
        ("o-3", "orders"): ("scheduled", None),                # delayed until 10:02:10
        ("p-1", "payments"): ("ready", None),                  # one failed delivery so far
        ("j-1", "jobs"): ("dead_lettered", "maxlen"),          # pushed out by j-3 (max 2 waiting)
        ("j-1", "jobs.dlq"): ("ready", None),
        ("j-2", "jobs"): ("ready", None), ("j-3", "jobs"): ("ready", None),
    }
    copy = early["o-2", "orders.dlq"]
    assert (copy["routingKey"], copy["cc"], copy["exchange"], copy["expireAt"]) == (
        "expired-orders", [], "orders.dlq", None)
    assert copy["deathHistory"] == [{"queue": "orders", "reason": "expired", "count": 1,
                                     "time": "2026-11-01T10:00:15.000000Z", "exchange": None,
                                     "routingKeys": ["orders", "audit"], "originalExpiration": "10000"}]

    for run in ("late", "late-again"):
        assert cli.main(example_args(tmp_path, "2026-11-01T10:05:00Z", tmp_path / run)) == 0
    late = states(tmp_path / "late")
    assert late["o-1", "orders"]["consumedAt"] == "2026-11-01T10:00:30.000000Z"
    assert (late["o-3", "orders"]["state"], late["o-3", "orders"]["stateTime"]) == (
        "dead_lettered", "2026-11-01T10:01:10.000000Z")        # TTL passed before it was deliverable
    assert (late["p-1", "payments"]["stateReason"], late["p-1", "payments"]["stateTime"]) == (
        "delivery_limit", "2026-11-01T10:01:00.000000Z")       # the 3rd failed delivery; N=2 allows 3
    for name in ("message_states", "dead_letters", "message_events"):
        a = (tmp_path / "late" / f"{name}.jsonl").read_bytes()
        assert a and a == (tmp_path / "late-again" / f"{name}.jsonl").read_bytes(), name
    out = capsys.readouterr().out
    assert "dead_lettered (delivery_limit): 1" in out and "message_states" in out


def test_bad_event_lines_are_listed_and_the_rest_used(spark, tmp_path, capsys):
    events = tmp_path / "events.jsonl"
    shutil.copy(f"{EXAMPLE}/events.jsonl", events)
    with open(events, "a") as f:
        f.write('{"topic":"orders","messageId":"o-3","event":"bounced","time":"2026-11-01T10:00:11Z"}\n')
        f.write("not json\n")
        f.write('{"topic":"orders","messageId":"o-3","event":"acked","time":"2026-11-01T10:00:11"}\n')
    args = example_args(tmp_path, "2026-11-01T10:05:00Z", tmp_path / "out")
    args[args.index("--events") + 1] = str(events)
    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert f"{events}:6: event: 'bounced' is not one of" in out
    assert f"{events}:7:" in out and f"{events}:8: time: give a zone" in out
    assert states(tmp_path / "out")["p-1", "payments"]["state"] == "dead_lettered"


def test_policy_errors_name_the_key(tmp_path, capsys):
    bad = tmp_path / "p.yaml"
    bad.write_text("orders:\n  messageTtlMs: -5\n")
    assert cli.main(["replay", "--messages", f"{EXAMPLE}/messages.jsonl", "--policies", str(bad)]) == 2
    assert "orders.messageTtlMs" in capsys.readouterr().err
    assert cli.main(["replay", "--as-of", "yesterday", "--messages", f"{EXAMPLE}/messages.jsonl"]) == 2
    assert "--as-of: not a time" in capsys.readouterr().err


def test_replay_over_the_lake_tables(spark, replayed):
    settings, acked, _ = replayed
    lake = settings.lake.table_path
    got = spark.sql(f"SELECT state, stateReason, hop, count(*) AS n FROM delta.`{lake('message_states')}` "
                    "WHERE topic IN ('orders', 'orders.dlq') GROUP BY 1, 2, 3").collect()
    by = {(r.state, r.stateReason, r.hop): r.n for r in got}
    stored = spark.sql(f"SELECT count(*) AS n FROM delta.`{lake('messages')}` WHERE topic = 'orders' "
                       "AND NOT coalesce(systemCopy, false) AND retryOf IS NULL").first().n
    # Every order expired a minute after it was stored, unless consumed before: the one acked a
    # second after, and RocketMQ ones below their group's committed offset (consumer_offsets).
    # A RocketMQ order retried by its consumer died by rejection into %RETRY% (not counted here).
    assert set(by) <= {("dead_lettered", "expired", 0), ("dead_lettered", "rejected", 0), ("ready", None, 0),
                       ("ready", None, 1)}
    assert sum(n for k, n in by.items() if k[2] == 0) == stored
    assert by[("dead_lettered", "expired", 0)] == by[("ready", None, 1)] > 0
    ready = spark.sql(f"SELECT uniqueId, consumedAt FROM delta.`{lake('message_states')}` "
                      "WHERE topic = 'orders' AND state = 'ready'").collect()
    assert acked in {r.uniqueId for r in ready} and all(r.consumedAt is not None for r in ready)
    expired = by[("dead_lettered", "expired", 0)]
    dl = spark.sql(f"SELECT count(*) AS n, max(size(deathHistory)) AS h FROM delta.`{lake('dead_letters')}` "
                   "WHERE topic = 'orders.dlq'").first()
    assert (dl.n, dl.h) == (expired, 1)
    ev = spark.read.format("delta").load(lake("consumer_events"))
    assert ev.count() == 2 and ev.where("ingestedAt IS NULL").count() == 0
    # RocketMQ: the sample's retried messages went original -> %RETRY%billing -> (some) %DLQ%billing,
    # linked by UNIQ_KEY into one history each.
    chains = spark.sql(f"SELECT topic, hop, transform(deathHistory, d -> concat(d.reason, ':', d.count)) AS h, "
                       f"firstDeathReason FROM delta.`{lake('message_states')}` WHERE startswith(topic, '%DLQ%') "
                       "OR startswith(topic, '%RETRY%')").collect()
    assert {(r.topic, r.hop, tuple(r.h), r.firstDeathReason) for r in chains} == {
        ("%RETRY%billing", 1, ("rejected:1",), "rejected"),
        ("%DLQ%billing", 2, ("delivery_limit:1", "rejected:1"), "rejected")}


def test_views(spark, replayed):
    from msglake.pipelines.io.catalog import register_tables

    settings, _, _ = replayed
    register_tables(spark, settings)  # the shared session's names point at whichever lake a test opened last
    lake = settings.lake.table_path
    names = {r.viewName for r in spark.sql("SHOW VIEWS").collect()} | {t.name for t in spark.catalog.listTables()}
    assert {"v_messages", "v_trace", "v_dead_letters", "v_backlog"} <= names
    m = spark.read.format("delta").load(lake("messages"))
    curated = m.where("NOT coalesce(systemCopy, false) AND retryOf IS NULL")
    assert spark.table("v_messages").count() == curated.count() < m.count()
    # v_backlog adds up to message_states, state by state.
    states = spark.read.format("delta").load(lake("message_states"))
    b = spark.sql("SELECT sum(copies) c, sum(ready) r, sum(deadLettered) d, sum(readyUnconsumed) u FROM v_backlog").first()
    assert (b.c, b.r, b.d) == (states.count(), states.where("state = 'ready'").count(),
                               states.where("state = 'dead_lettered'").count())
    assert b.u == states.where("state = 'ready' AND consumedAt IS NULL").count() < b.r
    # v_dead_letters: one row per history entry, the latest death first.
    dl = spark.read.format("delta").load(lake("dead_letters"))
    assert spark.table("v_dead_letters").count() == dl.selectExpr("sum(size(deathHistory))").first()[0]
    dlq = spark.sql("SELECT deathIndex, reason FROM v_dead_letters WHERE deadLetterTopic = '%DLQ%billing' "
                    "AND uniqueId = (SELECT min(uniqueId) FROM v_dead_letters WHERE deadLetterTopic = '%DLQ%billing') "
                    "ORDER BY deathIndex").collect()
    assert [(r.deathIndex, r.reason) for r in dlq] == [(0, "delivery_limit"), (1, "rejected")]
    # v_trace: the hops of one trace, in store order, each latency from the previous hop; an
    # expired order's trace ends in its dead-lettered copy in orders.dlq.
    trace = spark.sql("SELECT traceId FROM v_trace GROUP BY traceId HAVING count(*) = 2 "
                      "AND array_contains(collect_list(topic), 'orders.dlq') ORDER BY traceId LIMIT 1").first()[0]
    hops = spark.sql(f"SELECT topic, hop, hopIndex, latencyMs, bornTimestamp FROM v_trace WHERE traceId = '{trace}' "
                     "ORDER BY hopIndex").collect()
    assert [(h.topic, h.hop, h.hopIndex) for h in hops] == [("orders", None, 1), ("orders.dlq", 1, 2)]
    assert hops[1].latencyMs == 60_000  # the TTL: stored in orders.dlq a minute after orders
    assert hops[0].latencyMs is None if hops[0].bornTimestamp is None else hops[0].latencyMs >= 0
    rmq = spark.sql("SELECT traceId, collect_list(topic) AS topics FROM (SELECT * FROM v_trace ORDER BY hopIndex) "
                    "GROUP BY traceId HAVING array_contains(topics, '%DLQ%billing') LIMIT 1").first()
    assert rmq is not None and "%RETRY%billing" in rmq.topics


def test_a_view_whose_columns_are_missing_is_left_out_not_fatal(spark, tmp_path, caplog):
    from msglake.pipelines.io.views import LOG, register_views

    spark.createDataFrame([("t", 1)], "topic string, partition int").createOrReplaceTempView("messages")
    LOG.addHandler(caplog.handler)  # the CLI's "msglake" logger does not pass records up to pytest's
    try:
        assert register_views(spark, {"messages"}) == []   # both views read columns it lacks
        assert "view v_messages not registered" in caplog.text
        assert not spark.catalog.tableExists("v_messages")
    finally:
        LOG.removeHandler(caplog.handler)
        spark.catalog.dropTempView("messages")


def test_bad_message_lines_are_listed_with_their_numbers(spark, tmp_path, capsys):
    messages = tmp_path / "messages.jsonl"
    good = open(f"{EXAMPLE}/messages.jsonl").read().splitlines()
    messages.write_text("\n".join(good[:2] + ["{not json", '{"topic": "orders", "messageId": "x-1"}'] + good[2:]
                                  + ["[1, 2]"]) + "\n")
    args = example_args(tmp_path, "2026-11-01T10:05:00Z", tmp_path / "out")
    args[args.index("--messages") + 1] = str(messages)
    assert cli.main(args) == 1  # the replay ran; the exit status says input lines were not used
    out = capsys.readouterr().out
    listed = [line.strip() for line in out.splitlines() if "input line not used" in line]
    assert [line.split(": ")[1] for line in listed] == [f"{messages}:3", f"{messages}:4", f"{messages}:{len(good) + 3}"]
    assert "not JSON" in listed[0] and "missing storeTimestamp" in listed[1] and "not a JSON object" in listed[2]


def test_a_json_lines_priority_is_the_producers(spark, tmp_path):
    from msglake.pipelines.jobs.replay import read_messages_json
    from msglake.transforms.semantics import effective_priority

    lines = [{"topic": "amqp.q", "messageId": "a", "storeTimestamp": "2026-11-01T10:00:00Z", "priority": 2},
             {"topic": "amqp.q", "messageId": "b", "storeTimestamp": "2026-11-01T10:00:01Z"},
             {"topic": "amqp.q", "messageId": "c", "storeTimestamp": "2026-11-01T10:00:02Z", "priority": 9,
              "headers": {"x": "1"}},
             {"topic": "amqp.q", "messageId": "d", "storeTimestamp": "2026-11-01T10:00:03Z", "priority": 1,
              "headers": {"priority": "1"}}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    loaded = read_messages_json(spark, str(tmp_path / "m.jsonl"))
    got = loaded.df.select("messageId", effective_priority({"amqp.*": {"maxPriority": 3}}).alias("p"),
                           F.col("headers")["x"].alias("x")).orderBy("messageId")
    # given 2; missing: 0 (AMQP); 9 above the maximum: 3, other headers kept; header and field agree: 1
    assert_rows(got, [("a", 2, None), ("b", 0, None), ("c", 3, "1"), ("d", 1, None)])


def test_an_event_names_one_message_or_is_refused(spark, tmp_path, capsys):
    """NSQ numbers ids per partition; a RocketMQ batch send shares one UNIQ_KEY: an id that fits
    several messages is refused with its line, never given to one of them."""
    t = "2026-11-01T10:00:0{}Z"
    lines = [
        # the same NSQ id in partitions 0 and 1 of orders (a TTL of 1 s)
        {"topic": "orders", "partition": 0, "messageId": "0000000000000005", "storeTimestamp": t.format(0)},
        {"topic": "orders", "partition": 1, "messageId": "0000000000000005", "storeTimestamp": t.format(0)},
        # a RocketMQ batch send of two: own UNIQ_KEYs U1/U2, both report the batch's B
        {"topic": "pay", "partition": 3, "messageId": "OFF1", "uniqueId": "B", "producerUniqueId": "U1",
         "storeTimestamp": t.format(0)},
        {"topic": "pay", "partition": 3, "messageId": "OFF2", "uniqueId": "B", "producerUniqueId": "U2",
         "storeTimestamp": t.format(0)},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "p.yaml").write_text("orders: {messageTtlMs: 1000}\npay: {messageTtlMs: 1000}\n")
    events = [
        {"topic": "orders", "messageId": "0000000000000005", "event": "acked", "time": t.format(0)},  # 1: which?
        {"topic": "orders", "partition": 1, "messageId": "0000000000000005", "event": "acked", "time": t.format(0)},
        {"topic": "pay", "messageId": "B", "event": "acked", "time": t.format(0)},  # 3: which member?
        {"topic": "pay", "messageId": "OFF2", "event": "acked", "time": t.format(0)},  # 4: U2 by offset msgId
        {"topic": "orders", "partition": -1, "messageId": "x", "event": "acked", "time": t.format(0)},
    ]
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    out = tmp_path / "out"
    assert cli.main(["replay", "--lake", str(tmp_path / "lake"), "--messages", str(tmp_path / "m.jsonl"),
                     "--policies", str(tmp_path / "p.yaml"), "--events", str(tmp_path / "e.jsonl"),
                     "--as-of", t.format(5), "--json-out", str(out)]) == 1
    said = capsys.readouterr().out
    assert (f"{tmp_path / 'e.jsonl'}:1: ambiguous: id '0000000000000005' names 2 messages in 'orders' "
            "(partitions 0, 1); add \"partition\"") in said
    assert f"{tmp_path / 'e.jsonl'}:3: ambiguous: id 'B' names 2 messages in 'pay' (their own ids U1, U2" in said
    assert f"{tmp_path / 'e.jsonl'}:5: partition: a whole number >= 0 is required (got -1)" in said
    with open(out / "message_states.jsonl") as f:
        got = sorted((r["topic"], r["partition"], r["uniqueId"], r["state"], r["consumedAt"] is not None)
                     for r in map(json.loads, f))
    assert got == [("orders", 0, "0000000000000005", "expired", False),
                   ("orders", 1, "0000000000000005", "ready", True),
                   ("pay", 3, "U1", "expired", False), ("pay", 3, "U2", "ready", True)]


def test_a_small_replay_runs_interpreted_and_writes_what_a_compiled_one_does(spark, tmp_path, monkeypatch):
    """The worked example is a small job (session.sized_for): Spark evaluates its expressions
    without generated code. Forced to compile (no job is small), it writes the same bytes."""
    from contextlib import contextmanager

    from msglake.pipelines import session

    used, real = [], session.sized_for

    @contextmanager
    def noted(spark_, small):
        with real(spark_, small) as interpreted:
            used.append((interpreted, spark_.conf.get("spark.sql.codegen.factoryMode")))
            yield interpreted

    monkeypatch.setattr(session, "sized_for", noted)
    assert cli.main(example_args(tmp_path, "2026-11-01T10:05:00Z", tmp_path / "interpreted")) == 0
    monkeypatch.setattr(session, "SMALL_JOB_ROWS", 0)
    assert cli.main(example_args(tmp_path, "2026-11-01T10:05:00Z", tmp_path / "compiled")) == 0
    assert used == [(True, "NO_CODEGEN"), (False, "FALLBACK")]
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"  # set back
    for name in ("message_states", "dead_letters", "message_events"):
        a = (tmp_path / "interpreted" / f"{name}.jsonl").read_bytes()
        assert a and a == (tmp_path / "compiled" / f"{name}.jsonl").read_bytes(), name


def test_a_replay_is_small_by_the_rows_it_reads(spark, tmp_path, monkeypatch):
    from msglake.pipelines import session
    from msglake.pipelines.jobs import replay
    from tests.conftest import make_settings

    settings = make_settings(tmp_path / "lake")
    messages, events = f"{EXAMPLE}/messages.jsonl", [f"{EXAMPLE}/events.jsonl"]  # 7 + 5 lines
    assert replay.small_input(None, settings, messages, events, True)
    monkeypatch.setattr(session, "SMALL_JOB_ROWS", 11)
    assert not replay.small_input(None, settings, messages, events, True)
    monkeypatch.setattr(session, "SMALL_JOB_ROWS", 12)
    assert replay.small_input(None, settings, messages, events, True)
    monkeypatch.setattr(replay, "COUNTED_BYTES", 100)  # too large to count: not small
    assert not replay.small_input(None, settings, messages, events, True)
    monkeypatch.undo()

    # the lake's tables: counted with a session, unknown before one starts
    assert replay.small_input(None, settings, None, None, True)  # no tables yet: nothing to read
    spark.range(20).write.format("delta").save(settings.lake.table_path("messages"))
    spark.range(5).write.format("delta").save(settings.lake.table_path("consumer_events"))
    assert not replay.small_input(None, settings, None, None, True)
    assert replay.small_input(spark, settings, None, None, True)
    monkeypatch.setattr(session, "SMALL_JOB_ROWS", 24)
    assert not replay.small_input(spark, settings, None, None, True)
    assert replay.small_input(spark, settings, messages, None, True)  # 7 lines + the lake's 5 events
