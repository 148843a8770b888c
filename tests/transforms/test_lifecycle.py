"""semantics.md §4-7: fates, dead-lettering across topics, x-death histories, states and events at T."""
import datetime as dt

import pytest
from pyspark.sql import Row, functions as F

from msglake.pipelines import settings as S
from msglake.pipelines.jobs.evaluate import evaluate
from msglake.transforms.lifecycle import NEVER, overflow_deaths

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 1, tzinfo=UTC)
MSG = ("topic string, partition int, sourceFormat string, segment string, segmentPosition bigint, messageId string, "
       "uniqueId string, queueOffset bigint, bornTimestamp timestamp, storeTimestamp timestamp, "
       "delayTime bigint, startDeliverTime timestamp, expireTime timestamp, deliveryCount int, "
       "properties map<string,string>, bodySize int, systemCopy boolean")
EVENTS = "topic string, messageId string, `group` string, event string, time timestamp"


def at(ms):
    return None if ms is None else T0 + dt.timedelta(milliseconds=ms)


def msg(i, topic="a", store=0, props=None, body=10, delivery=0, delay=None, expire=None, uid=None, partition=0,
        system=None, fmt="nsq-ext"):
    return (topic, partition, fmt, f"{topic}-seg", i, f"m{i}", uid, i, at(store), at(store), delay, None,
            at(expire), delivery, props or {}, body, system)


def policies(doc):
    return {k: v.model_dump() for k, v in S.from_dict({"policies": doc}).policies.items()}


#: Cases by name: (rows, policies, T, consumer events, offsets, max hops). Each test registers
#: its cases at import; one fixture evaluates all cases with the same T and hop bound in one
#: Spark run, each in its own namespace (a "~name" suffix on topics and ids), and hands every
#: test its own states back without the suffix.
CASES: dict = {}


def case(name, rows, doc, t, events=(), offsets=(), max_hops=16):
    CASES[name] = (rows, doc, t, events, offsets, max_hops)
    return name


def _tag(x, ns):
    return None if x is None else f"{x}~{ns}"


def _untag(v, ns, shift):
    """A result value without the case's namespace, its times moved back by ``shift`` ms."""
    if isinstance(v, str):
        return v.replace(f"~{ns}", "")
    if isinstance(v, dt.datetime):
        return v - dt.timedelta(milliseconds=shift)
    if isinstance(v, list):
        return [_untag(x, ns, shift) for x in v]
    if isinstance(v, Row):
        d = {k: _untag(x, ns, shift) for k, x in v.asDict(recursive=False).items()}
        d.update({k: d[k] - shift for k in ("st", "consumed") if d.get(k) is not None})
        return Row(**d)
    return v


#: Every case is evaluated at this T, its own times moved by (COMMON_T - its T): the rules only
#: ever compare times with each other, so the states are the same.
COMMON_T = 20_000


def _move(x, shift):
    return x + dt.timedelta(milliseconds=shift) if isinstance(x, dt.datetime) else x


@pytest.fixture(scope="module")
def got(spark):
    groups: dict = {}
    for name, (rows, doc, t, events, offsets, hops) in CASES.items():
        groups.setdefault(hops, []).append(name)
    out = {}
    t0 = int(T0.timestamp() * 1000)
    for hops, names in groups.items():
        rows, pols, evs, offs = [], {}, [], []
        for ns in names:
            r, doc, t, events, offsets, _ = CASES[ns]
            shift = COMMON_T - t
            rows += [tuple(_move(x, shift) for x in (_tag(m[0], ns),) + m[1:5] + (_tag(m[5], ns), _tag(m[6], ns))
                           + m[7:]) for m in r]
            for k, v in doc.items():
                pols[_tag(k, ns)] = {**v, **({"deadLetterTopic": _tag(v["deadLetterTopic"], ns)}
                                          if "deadLetterTopic" in v else {})}
            evs += [(_tag(tp, ns), _tag(m, ns), "g", e, at(ms + shift)) for tp, m, e, ms in events]
            offs += [(_tag(tp, ns), queue, offset, at(ms + shift)) for tp, queue, offset, ms in offsets]
        ev = spark.createDataFrame(evs, EVENTS) if evs else None
        off = spark.createDataFrame(offs, "topic string, queue int, offset bigint, snapshotTime timestamp") \
            if offs else None
        result = evaluate(spark.createDataFrame(rows, MSG), policies(pols), at(COMMON_T), consumer_events=ev,
                          consumer_offsets=off, max_hops=hops)
        states = result.states.withColumn("st", F.unix_millis("stateTime") - t0).withColumn(
            "consumed", F.unix_millis("consumedAt") - t0).collect()
        for ns in names:
            shift = COMMON_T - CASES[ns][2]
            mine = [_untag(r, ns, shift) for r in states if r.topic.endswith(f"~{ns}")]
            out[ns] = ({(r.uniqueId, r.topic, r.hop): r for r in mine}, result.converged)
    return lambda name: out[name][0]


def history(r):
    return [(d.queue, d.reason, d["count"], int(d.time.timestamp() * 1000) - int(T0.timestamp() * 1000))
            for d in r.deathHistory]


case("expiry", [msg(1, props={"expiration": "100"}), msg(2, delay=500), msg(3, props={"expiration": "0"}),
                msg(4, delay=500, props={"expiration": "100"})], {}, 200)
case("expiry-later", [msg(2, delay=500)], {}, 600)


def test_expiry_without_a_dead_letter_topic_and_scheduled_then_ready(got):
    s = got("expiry")
    assert (s["m1", "a", 0].state, s["m1", "a", 0].stateReason, s["m1", "a", 0].st) == ("expired", "expired", 100)
    assert s["m2", "a", 0].state == "scheduled"
    assert s["m3", "a", 0].state == "expired" and s["m3", "a", 0].st == 0       # expiration "0": at once
    assert s["m4", "a", 0].state == "expired"                                  # expired before deliverable
    later = got("expiry-later")
    assert later["m2", "a", 0].state == "ready" and later["m2", "a", 0].st == 500


PROPS = {"expiration": "100", "exchange": "orders-x", "routingKey": "eu", "CC": "audit,bi"}
case("copy", [msg(1, props=PROPS)],
     {"a": {"deadLetterTopic": "dlq", "deadLetterRoutingKey": "dead", "deadLetterExchange": "dlx"}, "dlq": {}}, 1000)
case("copy-keeps-key", [msg(1, props=PROPS)], {"a": {"deadLetterTopic": "dlq"}, "dlq": {}}, 1000)


def test_expired_copy_changes_exchange_routing_key_cc_and_loses_its_expiration(got):
    s = got("copy")
    orig, copy = s["m1", "a", 0], s["m1", "dlq", 1]
    assert (orig.state, orig.stateReason, orig.deadLetterTopic) == ("dead_lettered", "expired", "dlq")
    assert (copy.state, copy.exchange, copy.routingKey, copy.cc) == ("ready", "dlx", "dead", [])
    assert copy.expireAt is None and copy.parentRowId == orig.rowId and copy.partition == 0
    d = copy.deathHistory[0]
    assert (d.queue, d.reason, d["count"], d.exchange, d.routingKeys, d.originalExpiration) == (
        "a", "expired", 1, "orders-x", ["eu", "audit", "bi"], "100")
    assert (copy.firstDeathQueue, copy.firstDeathReason, copy.firstDeathExchange) == ("a", "expired", "orders-x")
    assert len(s) == 2
    # Without a dead-letter routing key the copy keeps its routing key and CC list.
    s = got("copy-keeps-key")
    assert (s["m1", "dlq", 1].exchange, s["m1", "dlq", 1].routingKey, s["m1", "dlq", 1].cc) == (
        "dlq", "eu", ["audit", "bi"])


case("chain", [msg(1, store=10, props={"expiration": "5000"})],
     {"a": {"messageTtlMs": 100, "deadLetterTopic": "b"}, "b": {"messageTtlMs": 50, "deadLetterTopic": "c"}, "c": {}},
     1000)


def test_a_copy_expires_again_by_its_new_topics_ttl_counted_from_its_death(got):
    s = got("chain")
    assert [(k[1], k[2], r.state, r.st) for k, r in sorted(s.items(), key=lambda kv: kv[0][2])] == [
        ("a", 0, "dead_lettered", 110), ("b", 1, "dead_lettered", 160), ("c", 2, "ready", 160)]
    assert history(s["m1", "c", 2]) == [("b", "expired", 1, 160), ("a", "expired", 1, 110)]
    assert s["m1", "c", 2].firstDeathQueue == "a"


case("ttl-cycle", [msg(1)], {"a": {"messageTtlMs": 100, "deadLetterTopic": "b"},
                              "b": {"messageTtlMs": 100, "deadLetterTopic": "a"}}, 10_000)
case("self-cycle", [msg(1)], {"a": {"messageTtlMs": 100, "deadLetterTopic": "a"}}, 10_000)


def test_two_topic_ttl_cycle_is_dropped(got):
    s = got("ttl-cycle")
    assert (s["m1", "b", 1].state, s["m1", "b", 1].stateReason, s["m1", "b", 1].st) == ("dropped", "cycle", 200)
    assert len(s) == 2
    # A topic dead-lettering expired messages to itself drops them at the first death.
    s = got("self-cycle")
    assert (s["m1", "a", 0].state, s["m1", "a", 0].stateReason) == ("dropped", "cycle")


# a -rejected-> b -expired-> a -rejected-> b -expired-> a ...: a consumer took part, so the cycle
# goes on; a repeated (queue, reason) increments its count, moves to the front and keeps its first time.
case("rejection-cycle", [msg(1)], {"a": {"deadLetterTopic": "b"}, "b": {"messageTtlMs": 100, "deadLetterTopic": "a"}},
     1000, events=[("a", "m1", "rejected", 10), ("a", "m1", "rejected", 150)])


def test_cycle_with_a_rejection_is_not_dropped_and_repeated_deaths_count(got):
    s = got("rejection-cycle")
    assert [(k[1], k[2], r.state, r.stateReason) for k, r in sorted(s.items(), key=lambda kv: kv[0][2])] == [
        ("a", 0, "dead_lettered", "rejected"), ("b", 1, "dead_lettered", "expired"),
        ("a", 2, "dead_lettered", "rejected"), ("b", 3, "dead_lettered", "expired"), ("a", 4, "ready", None)]
    assert history(s["m1", "a", 4]) == [("b", "expired", 2, 110), ("a", "rejected", 2, 10)]
    assert history(s["m1", "a", 2]) == [("b", "expired", 1, 110), ("a", "rejected", 1, 10)]
    assert history(s["m1", "b", 3]) == [("a", "rejected", 2, 10), ("b", "expired", 1, 110)]


case("hop-bound", [msg(1)], {"a": {"deadLetterTopic": "a"}}, 1000,
     events=[("a", "m1", "rejected", 10 + i) for i in range(10)], max_hops=3)


def test_rejection_loop_ends_at_the_hop_bound(got):
    s = got("hop-bound")
    assert (s["m1", "a", 3].state, s["m1", "a", 3].stateReason) == ("dropped", "hop_limit")
    assert history(s["m1", "a", 3]) == [("a", "rejected", 3, 10)] and len(s) == 4


case("missing", [msg(1), msg(2, topic="b")], {"a": {"messageTtlMs": 5, "deadLetterTopic": "nowhere"}}, 100,
     events=[("b", "m2", "rejected", 50)])


def test_missing_target_and_rejection_without_dead_letter_topic_are_dropped(got):
    s = got("missing")
    assert (s["m1", "a", 0].state, s["m1", "a", 0].stateReason) == ("dropped", "missing_target")
    assert (s["m2", "b", 0].state, s["m2", "b", 0].stateReason) == ("dropped", "rejected")


case("consumed", [msg(1), msg(2), msg(3)], {"a": {"messageTtlMs": 100, "deadLetterTopic": "d"}, "d": {}}, 500,
     events=[("a", "m1", "acked", 99), ("a", "m2", "acked", 100), ("a", "m3", "acked", 600)])


def test_consumed_before_expiry_does_not_expire(got):
    s = got("consumed")
    assert (s["m1", "a", 0].state, s["m1", "a", 0].consumed) == ("ready", 99)
    assert s["m2", "a", 0].state == "dead_lettered"   # consumed at the expiry instant: too late
    assert s["m3", "a", 0].state == "dead_lettered"   # consumed after T: not known at T


case("offsets", [msg(0), msg(1), msg(2), msg(3)], {"a": {"messageTtlMs": 100}}, 1000,
     offsets=[("a", 0, 2, 50), ("a", 0, 3, 300)])


def test_consumer_offsets_mark_consumption(got):
    s = got("offsets")
    assert [s[f"m{i}", "a", 0].state for i in range(4)] == ["ready", "ready", "expired", "expired"]
    assert s["m1", "a", 0].consumed == 50


OVERFLOW = [
    ("drop-head", {"m0": ("dead_lettered", 2), "m1": ("dead_lettered", 3), "m2": ("ready", 2), "m3": ("ready", 3)}),
    ("reject-publish-dlx", {"m0": ("ready", 0), "m1": ("ready", 1), "m2": ("dead_lettered", 2),
                            "m3": ("dead_lettered", 3)}),
    ("reject-publish", {"m0": ("ready", 0), "m1": ("ready", 1), "m2": ("dropped", 2), "m3": ("dropped", 3)}),
]
for _mode, _ in OVERFLOW:
    case(f"overflow-{_mode}", [msg(i, topic="q", store=i) for i in range(4)],
         {"q": {"maxLength": 2, "overflow": _mode, "deadLetterTopic": "d"}, "d": {}}, 10)


@pytest.mark.parametrize(("overflow", "states"), OVERFLOW)
def test_overflow_modes(got, overflow, states):
    s = got(f"overflow-{overflow}")
    assert {k[0]: (r.state, r.st) for k, r in s.items() if k[1] == "q"} == states
    assert {r.stateReason for k, r in s.items() if k[1] == "q" and r.state != "ready"} == {"maxlen"}
    assert sum(1 for k in s if k[1] == "d") == (0 if overflow == "reject-publish" else 2)


case("max-bytes", [msg(0, topic="q", store=0, body=10), msg(1, topic="q", store=1, body=10),
                   msg(2, topic="q", store=2, body=10), msg(3, topic="q", store=5, body=5)],
     {"q": {"maxLengthBytes": 25, "deadLetterTopic": "d"}, "d": {}}, 10, events=[("q", "m1", "acked", 4)])


def test_max_length_bytes_counts_body_bytes_and_departures_free_room(got):
    s = got("max-bytes")
    assert [s[f"m{i}", "q", 0].state for i in range(4)] == ["dead_lettered", "ready", "ready", "ready"]
    assert s["m0", "d", 1].deathHistory[0].reason == "maxlen"


def test_overflow_simulation_directly():
    import numpy as np
    store = np.array([0, 1, 2, 3, 4]); size = np.array([1, 1, 1, 1, 1])
    leave = np.array([NEVER, 2, NEVER, NEVER, NEVER])   # m1 consumed at 2, before m2 arrives
    assert overflow_deaths(store, size, leave, 2, None, False).tolist() == [3, -1, 4, -1, -1]
    assert overflow_deaths(store, size, leave, 2, None, True).tolist() == [-1, -1, -1, 3, 4]


LIMITS = [
    (2, 0, [10, 20], None),       # 2 failed deliveries, a 3rd may come: N=2 allows 3
    (2, 0, [10, 20, 30], 30),     # the 3rd failed delivery passes the limit
    (2, 3, [], 0),                # stored with deliveryCount 3 > 2: at once
    (0, 0, [10], 10),             # N=0: one delivery
]
for _i, (_limit, _delivery, _requeues, _) in enumerate(LIMITS):
    case(f"limit-{_i}", [msg(1, delivery=_delivery)], {"a": {"maxDeliveries": _limit, "deadLetterTopic": "d"}, "d": {}},
         100, events=[("a", "m1", "requeued", ms) for ms in _requeues])


@pytest.mark.parametrize(("i", "dead_at"), [(i, d) for i, (*_, d) in enumerate(LIMITS)])
def test_delivery_limit_n_allows_n_plus_one_deliveries(got, i, dead_at):
    r = got(f"limit-{i}")["m1", "a", 0]
    assert (r.state, r.st if dead_at is not None else None) == (
        ("dead_lettered", dead_at) if dead_at is not None else ("ready", None))
    if dead_at is not None:
        assert r.stateReason == "delivery_limit"


HEAD = [msg(0, store=0), msg(1, store=1, props={"expiration": "10"})]
case("head-only", HEAD, {"a": {"expiryAtHeadOnly": True}}, 100, events=[("a", "m0", "acked", 50)])
case("head-only-off", HEAD, {}, 100, events=[("a", "m0", "acked", 50)])
case("head-only-stuck", HEAD, {"a": {"expiryAtHeadOnly": True}}, 100)


def test_expiry_at_head_only_waits_for_older_messages(got):
    s = got("head-only")
    assert (s["m1", "a", 0].state, s["m1", "a", 0].st) == ("expired", 50)   # its expiry (11) waited for m0
    assert got("head-only-off")["m1", "a", 0].st == 11
    assert got("head-only-stuck")["m1", "a", 0].state == "ready"   # m0 never leaves: m1 never reaches the head


RMQ = dict(fmt="rocketmq-commitlog", uid="U1")
case("rocketmq", [msg(1, topic="orders", store=0, **RMQ), msg(2, topic="%RETRY%billing", store=100, delivery=1, **RMQ),
                  msg(3, topic="%RETRY%billing", store=200, delivery=2, **RMQ),
                  msg(4, topic="%DLQ%billing", store=300, delivery=3, **RMQ),
                  msg(5, topic="SCHEDULE_TOPIC_XXXX", store=90, system=True, **RMQ)], {}, 1000)


def test_rocketmq_retry_chain_is_one_history(got):
    s = got("rocketmq")
    assert sorted((k[1], k[2], r.state) for k, r in s.items()) == [
        ("%DLQ%billing", 3, "ready"), ("%RETRY%billing", 1, "dead_lettered"), ("%RETRY%billing", 2, "dead_lettered"),
        ("orders", 0, "dead_lettered")]
    dlq = s["U1", "%DLQ%billing", 3]
    assert history(dlq) == [("%RETRY%billing", "delivery_limit", 1, 300), ("%RETRY%billing", "rejected", 2, 100)]
    assert (dlq.firstDeathQueue, dlq.firstDeathReason, dlq.segmentPosition) == ("%RETRY%billing", "rejected", 4)


def run(spark, rows, doc, t, events=()):
    ev = spark.createDataFrame([(tp, m, "g", e, at(ms)) for tp, m, e, ms in events], EVENTS) if events else None
    result = evaluate(spark.createDataFrame(rows, MSG), policies(doc), at(t), consumer_events=ev)
    return result, {(r.uniqueId, r.topic, r.hop): r for r in result.states.collect()}


def test_events_give_the_state_at_any_earlier_time(spark):
    doc = {"a": {"messageTtlMs": 100, "deadLetterTopic": "b"}, "b": {"messageTtlMs": 100}}
    rows = [msg(1, store=0, delay=50), msg(2, store=10), msg(3, store=20, props={"expiration": "1000"})]
    events = [("a", "m2", "acked", 60)]
    full, _ = run(spark, rows, doc, 1000, events=events)
    log = full.events.withColumn("ms", F.unix_millis("time") - int(T0.timestamp() * 1000)).collect()
    for t in (15, 100, 250):
        _, s = run(spark, rows, doc, t, events=events)
        by_log = {}
        for e in sorted(log, key=lambda e: (e.ms, e.seq)):
            if e.ms <= t:
                by_log[e.uniqueId, e.topic, e.hop] = e.state
        assert by_log == {k: r.state for k, r in s.items()}, t


def test_a_batch_members_retry_joins_its_own_history_not_its_siblings(spark):
    # Two members of one RocketMQ batch send: own UNIQ_KEYs P1 and P2, both reporting the batch's
    # B as uniqueId (the broker appends it last). P1's consumer retry carries only B (the broker
    # rebuilt its properties from a map) and names its origin by offset msgId: ORIGIN_MESSAGE_ID.
    schema = MSG + ", producerUniqueId string"
    fmt = "rocketmq-commitlog"
    rows = [msg(1, topic="orders", fmt=fmt, uid="B") + ("P1",), msg(2, topic="orders", fmt=fmt, uid="B") + ("P2",),
            msg(3, topic="%RETRY%billing", store=100, delivery=1, fmt=fmt, uid="B",
                props={"ORIGIN_MESSAGE_ID": "m1"}) + ("B",),
            # a retry whose origin the lake does not hold keeps its own id: linked to nobody
            msg(4, topic="%RETRY%billing", store=150, delivery=1, fmt=fmt, uid="Q",
                props={"ORIGIN_MESSAGE_ID": "gone"}) + ("Q",)]
    result = evaluate(spark.createDataFrame(rows, schema), policies({}), at(1000))
    got = sorted((r.uniqueId, r.topic, r.hop, r.state) for r in result.states.collect())
    assert got == [("P1", "%RETRY%billing", 1, "ready"), ("P1", "orders", 0, "dead_lettered"),
                   ("P2", "orders", 0, "ready"), ("Q", "%RETRY%billing", 0, "ready")]
