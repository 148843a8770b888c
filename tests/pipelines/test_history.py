"""msglake history: one message's story, evaluated alone, equals the replay's rows for its copies."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from pyspark.sql import functions as F

from msglake.pipelines import cli
from msglake.pipelines.jobs.history import history, render_text
from msglake.pipelines.jobs.replay import run_replay
from msglake.pipelines.settings import from_dict
from tests.conftest import serving

pytestmark = pytest.mark.slow

T = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)
#: Copy columns the story and the replay must agree on.
SAME = ("rowId", "uniqueId", "parentRowId", "hop", "topic", "partition", "segment", "segmentPosition", "storeTimestamp",
        "deliverAt", "expireAt", "state", "stateReason", "stateTime", "consumedAt", "deadLetterTopic",
        "deathHistory", "firstDeathQueue", "firstDeathReason")


def _ts(v):
    v = dt.datetime.fromisoformat(v) if isinstance(v, str) else v
    return v.replace(tzinfo=dt.timezone.utc) if isinstance(v, dt.datetime) and v.tzinfo is None else v


def _norm(row: dict) -> tuple:
    def fix(v):
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            return {k: fix(x) for k, x in sorted(v.items())}
        return _ts(v) if isinstance(v, dt.datetime) or isinstance(v, str) and len(v) > 19 and v[10:11] == "T" else v
    return tuple(fix(row[k]) for k in SAME)


def _replay_json(spark, settings, tmp_path, name):
    out = tmp_path / name
    run_replay(spark, settings, as_of=T, json_out=str(out))
    with open(out / "message_states.jsonl") as f:
        states = {r["rowId"]: r for r in map(json.loads, f)}
    with open(out / "message_events.jsonl") as f:
        events: dict = {}
        for r in map(json.loads, f):
            events.setdefault(r["rowId"], []).append((r["event"], _ts(r["time"]), r["seq"], r["reason"]))
    return states, events


def _replay_tables(spark, settings):
    """The replayed fixture's own evaluation at T, from the lake's Delta tables."""
    at_t = F.col("asOf") == F.lit(T)
    states = {r["rowId"]: r.asDict(recursive=True) for r in
              spark.read.format("delta").load(settings.lake.table_path("message_states")).where(at_t).collect()}
    events: dict = {}
    for r in (spark.read.format("delta").load(settings.lake.table_path("message_events")).where(at_t)
              .orderBy("rowId", "seq").collect()):
        events.setdefault(r["rowId"], []).append((r["event"], _ts(r["time"]), r["seq"], r["reason"]))
    return states, events


def _agrees(story, states, events):
    assert story.copies
    for c in story.copies:
        assert _norm(c) == _norm(states[c["rowId"]]), c["topic"]
        assert [(e["event"], e["time"], e["seq"], e["reason"]) for e in c["events"]] == events[c["rowId"]]


@pytest.fixture(scope="module")
def lake(spark, replayed):
    settings, acked, _ = replayed
    states, events = _replay_tables(spark, settings)  # `msglake replay --as-of T` of the fixture
    return settings, acked, states, events


def test_an_acked_nsq_message_and_its_twin_in_the_other_partition(spark, lake, capsys):
    settings, acked, states, events = lake
    both = history(spark, settings, acked, as_of=T, topic="orders")
    # nsqd numbers ids per partition: the same id names one message in each partition
    parts = sorted((g[0]["partition"], g[0]["consumedAt"] is not None) for g in both.messages)
    assert len(parts) == 2 and sum(consumed for _, consumed in parts) == 1
    _agrees(both, states, events)
    assert not both.whole_topics
    # what became of the expired twin: its dead-letter copy in orders.dlq, with the death
    twin = next(g for g in both.messages if g[0]["consumedAt"] is None)
    assert [(c["topic"], c["hop"]) for c in twin] == [("orders", 0), ("orders.dlq", 1)]
    assert twin[1]["deathHistory"][0]["reason"] == "expired"

    conf = ["--lake", settings.lake.root]
    assert cli.main(["history", acked, "--topic", "orders", "--partition", str(parts[0][0]), "--as-of",
                     T.isoformat(), "--format", "json", *conf]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [len(m["copies"]) for m in doc["messages"]] == [2 if not parts[0][1] else 1]


def test_a_rocketmq_retry_chain_by_its_producer_id(spark, lake):
    settings, _, states, events = lake
    retried = (spark.read.format("delta").load(settings.lake.table_path("messages"))
               .where(F.col("topic").startswith("%DLQ%")).select("uniqueId").first())
    assert retried is not None
    story = history(spark, settings, retried["uniqueId"], as_of=T)
    topics = [c["topic"] for c in story.copies]
    assert topics[0] == "orders" and topics[-1].startswith("%DLQ%") and any(t.startswith("%RETRY%") for t in topics)
    _agrees(story, states, events)
    text = "\n".join(render_text(story))
    assert "1 message(s)" in text and "x-death: %RETRY%" in text and "state at T: ready" in text


def test_a_story_through_an_overflowing_topic_evaluates_that_topic_whole(spark, lake, tmp_path):
    settings, acked, _, _ = lake
    doc = settings.model_dump()
    doc["policies"] = {"orders": {"messageTtlMs": 60_000, "deadLetterTopic": "orders.dlq"},
                       "orders.dlq": {"maxLength": 3, "overflow": "drop-head"}}
    bounded = from_dict(doc, "test")
    states, events = _replay_json(spark, bounded, tmp_path, "bounded")
    story = history(spark, bounded, acked, as_of=T, topic="orders")
    assert story.whole_topics == ["orders", "orders.dlq"]
    _agrees(story, states, events)
    # most of the expired orders were pushed out of the bounded dead-letter topic
    assert "maxlen" in {c["stateReason"] for c in states.values() if c["topic"] == "orders.dlq"}


def test_an_unknown_id_is_one_line(spark, lake, capsys):
    settings = lake[0]
    assert cli.main(["history", "no-such-id", "--lake", settings.lake.root]) == 2  # bad input
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["msglake: error: no stored message has messageId, uniqueId or traceId 'no-such-id'"]


def test_a_running_server_tells_the_story_under_the_commands_policies(spark, replayed, capsys):
    """With `msglake serve` running for the lake, `msglake history` is answered in its warm session:
    under the command's own policies and options (not the server's), printed as in-process, errors
    as the same one line; a request that does not fit is refused by the server."""
    import re

    from msglake.pipelines.jobs.serve import HISTORY_ACTION, ask_server, find_server

    settings, acked, conf = replayed
    server_settings = from_dict({**settings.model_dump(), "policies": {}}, "test")  # the server's own: none
    ask = ["history", acked, "--topic", "orders", "--as-of", T.isoformat(), "--conf", str(conf)]
    with serving(spark, server_settings) as server:
        assert cli.main([*ask, "--format", "json"]) == 0 and server.lookups == 1
        # the command's policies: the unconsumed twin dead-letters into orders.dlq
        [twin] = [m["copies"] for m in json.loads(capsys.readouterr().out)["messages"]
                  if m["copies"][0]["consumedAt"] is None]
        assert [c["topic"] for c in twin] == ["orders", "orders.dlq"]
        # its partition alone, no hop allowed: dropped where it died
        narrow = [*ask, "--partition", str(twin[0]["partition"]), "--max-hops", "0"]
        assert cli.main(narrow) == 0 and server.lookups == 2
        served = capsys.readouterr().out
        assert "1 message(s), 1 copy" in served and "state at T: dropped (hop_limit)" in served
        assert cli.main([*narrow, "--in-process"]) == 0 and server.lookups == 2
        took = re.compile(r"\(\d+\.\ds\)")  # the lookup's own time
        assert took.sub("", capsys.readouterr().out) == took.sub("", served)

        assert cli.main(["history", "no-such-id", "--lake", settings.lake.root]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            "msglake: error: no stored message has messageId, uniqueId or traceId 'no-such-id'"]
        uri = find_server(settings)
        for request, why in (([acked], "not a JSON object"),
                             ({"id": 7, "maxHops": 4}, "id: expected str"),
                             ({"id": acked, "maxHops": True}, "maxHops: expected int"),
                             ({"id": acked, "maxHops": 10**9}, "maxHops must be 0..1,000"),
                             ({"id": acked, "maxHops": 4, "partition": 1 << 40}, "partition 0..2,147,483,647"),
                             ({"id": acked, "maxHops": 4, "asOf": "yesterday"}, "asOf: not an ISO-8601 time"),
                             ({"id": acked, "maxHops": 4, "policies": {"orders": {"messageTtlMs": "soon"}}},
                              "policies.orders.messageTtlMs")):
            reply = ask_server(uri, HISTORY_ACTION, request)
            assert reply["status"] == 2 and why in reply["err"] and "\n" not in reply["err"], reply
        assert server.lookups == 10


def test_a_later_lookup_sees_a_dead_letter_topic_that_got_its_first_message_since(spark, tmp_path):
    # The topics' first store times are remembered per version of the messages table: an append
    # that gives the dead-letter topic a message stored before the death changes the story.
    from msglake.schemas import MESSAGE_SCHEMA
    from msglake.schemas.spark import with_all_columns

    doc = from_dict({"lake": {"root": str(tmp_path / "lake")}}, "test").model_dump()
    doc["policies"] = {"a": {"messageTtlMs": 1_000, "deadLetterTopic": "a.dlq"}}  # a.dlq: not declared
    settings = from_dict(doc, "test")
    path = settings.lake.table_path("messages")

    def append(topic: str, message_id: str, stored: str) -> None:
        given = spark.createDataFrame(
            [(topic, 0, "synthetic", "seg", int(stored[-2:]), message_id, dt.datetime.fromisoformat(stored))],
            "topic string, partition int, sourceFormat string, segment string, segmentPosition bigint, "
            "messageId string, storeTimestamp timestamp")
        with_all_columns(given, MESSAGE_SCHEMA).write.format("delta").mode("append").save(path)

    append("a", "m1", "2026-01-01T00:00:10+00:00")
    append("b", "m2", "2026-01-01T00:00:20+00:00")
    before = history(spark, settings, "m1", as_of=T)
    assert [(c["topic"], c["state"], c["stateReason"]) for c in before.copies] == [("a", "dropped", "missing_target")]
    history(spark, settings, "m2", as_of=T)  # another lookup of the same version in between
    append("a.dlq", "m0", "2026-01-01T00:00:05+00:00")
    after = history(spark, settings, "m1", as_of=T)
    assert [(c["topic"], c["state"]) for c in after.copies] == [("a", "dead_lettered"), ("a.dlq", "ready")]


def test_a_lookup_is_a_small_job_unless_a_policy_can_make_its_story_reach_a_whole_topic():
    from msglake.pipelines.jobs.history import small_lookup
    from msglake.pipelines.settings import policy_dicts

    def small(policies: dict) -> bool:
        doc = from_dict({}, "test").model_dump()
        doc["policies"] = policies
        return small_lookup(policy_dicts(from_dict(doc, "test").policies))

    assert small({}) and small({"orders*": {"messageTtlMs": 1_000, "deadLetterTopic": "dlq"}, "dlq": {}})
    assert not small({"orders": {"messageTtlMs": 1_000, "deadLetterTopic": "dlq"}, "dlq": {"maxLength": 3}})
    assert not small({"jobs*": {"maxLengthBytes": 1 << 20}})
    assert not small({"audit": {"expiryAtHeadOnly": True}})
