"""semantics.md §1-4, §7 as columns: one test per rule."""
import datetime as dt
import random

import pytest
from pyspark.sql import functions as F

from msglake.errors import ConfigError
from msglake.pipelines import settings as S
from msglake.transforms.semantics import (
    deliver_at,
    delay_exceeds_max,
    effective_priority,
    message_type,
    expire_at,
    expire_time_ignored,
    policy_for,
    policy_value,
    state_at,
    stored_by,
)
from tests.conftest import assert_rows

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 1, tzinfo=UTC)
COLS = ("id int, topic string, priority int, headers map<string,string>, properties map<string,string>, "
        "bornTimestamp timestamp, storeTimestamp timestamp, delayTime bigint, startDeliverTime timestamp, "
        "expireTime timestamp")


def at(ms):
    return None if ms is None else T0 + dt.timedelta(milliseconds=ms)


def row(i, topic="orders", priority=5, headers=None, properties=None, born=0, store=10, delay=None, deliver=None,
        expire=None):
    return (i, topic, priority, headers or {}, properties or {}, at(born), at(store), delay, at(deliver), at(expire))


def ms_of(col):
    return F.unix_millis(col) - int(T0.timestamp() * 1000)


def policies(doc):
    return {k: v.model_dump() for k, v in S.from_dict({"policies": doc}).policies.items()}


def test_the_most_specific_policy_wins_without_inheriting(spark):
    pol = policies({"*": {"messageTtlMs": 1}, "ord*": {"messageTtlMs": 2}, "orders.eu*": {"maxLength": 5},
                    "orders": {"messageTtlMs": 4}})
    df = spark.createDataFrame([("orders",), ("orders.eu-1",), ("order",), ("payments",)], "topic string")
    # orders.eu* wins for orders.eu-1 and sets no TTL
    assert_rows(df.select("topic", policy_value(pol, "messageTtlMs").alias("v")),
                [("orders", 4), ("orders.eu-1", None), ("order", 2), ("payments", 1)])
    assert_rows(df.select(policy_value({}, "messageTtlMs", 9).alias("v")), [(9,)] * 4)


def test_a_policy_per_topic_is_one_lookup_however_many_topics(spark):
    # 300 topics with their own TTL, a glob under them, and an exact name that sets no TTL and
    # so shadows the glob: each topic gets its own policy's value, and the optimized plan holds
    # one map constant, not a branch per topic (plans and compiled classes grew with the topics).
    pol = {**{f"t{i}": {"messageTtlMs": i} for i in range(300)}, "t1*": {"messageTtlMs": 7}, "t1x": {}}
    topics = ["t0", "t17", "t299", "t1zz", "t1x", "u"]
    df = spark.createDataFrame([(t,) for t in topics], "topic string")
    ttl = df.select("topic", policy_value(pol, "messageTtlMs").alias("v"))
    assert_rows(ttl, [(t, policy_for(pol, t).get("messageTtlMs")) for t in topics], ignore_row_order=True)
    assert [r.v for r in ttl.where("topic IN ('t1zz', 't1x')").orderBy("topic").collect()] == [None, 7]
    assert ttl._jdf.queryExecution().optimizedPlan().toString().count("WHEN") <= 3


def test_a_policy_value_is_made_once_per_policies_key_and_default(spark):
    # The rounds ask for the same columns again and again: made once, reused. Equal policies in
    # another order are other policies (between equally specific globs the earlier wins), and
    # another default is another column.
    first, second = {"a*": {"messageTtlMs": 1}, "*a": {"messageTtlMs": 2}}, {"*a": {"messageTtlMs": 2},
                                                                            "a*": {"messageTtlMs": 1}}
    assert policy_value(first, "messageTtlMs") is policy_value(dict(first), "messageTtlMs")
    assert policy_value(first, "messageTtlMs", 5) is not policy_value(first, "messageTtlMs")
    df = spark.createDataFrame([("aa",), ("b",)], "topic string")
    assert_rows(df.select("topic", policy_value(first, "messageTtlMs").alias("one"),
                          policy_value(second, "messageTtlMs").alias("two"),
                          policy_value(first, "messageTtlMs", 5).alias("five")),
                [("aa", 1, 2, 1), ("b", None, None, 5)])


def test_effective_ttl_is_the_smaller_of_queue_ttl_and_message_expiration(spark):
    pol = policies({"orders": {"messageTtlMs": 1000}})
    df = spark.createDataFrame([
        row(1, properties={"expiration": "300"}),      # message's own is shorter
        row(2, properties={"expiration": "5000"}),     # queue TTL is shorter
        row(3),                                        # queue TTL only
        row(4, topic="payments"),                      # no policy, no expiration: never
        row(5, properties={"expiration": "0"}),        # "0": expires at once
        row(6, properties={"expiration": "soon"}),     # not a number: ignored
        row(7, expire=500),                            # expireTime earlier than both
        row(8, born=100, expire=100),                  # expireTime at born: ignored (and flagged)
    ], COLS)
    assert_rows(df.select("id", ms_of(expire_at(pol)).alias("e"), expire_time_ignored().alias("ignored")),
                [(1, 310, False), (2, 1010, False), (3, 1010, False), (4, None, False), (5, 10, False),
                 (6, 1010, False), (7, 500, False), (8, 1010, True)])


def test_delivery_time_by_header_level_and_timer(spark):
    df = spark.createDataFrame([
        row(1, delay=5000),                      # delayTime header (or a RocketMQ DELAY level, decoded to ms)
        row(2, born=None, store=40, delay=100),  # no born time: from the store time
        row(3, delay=5000, deliver=90_000),      # absolute time wins (RocketMQ TIMER_DELIVER_MS)
        row(4),                                  # no delay: when stored
    ], COLS)
    assert_rows(df.select("id", ms_of(deliver_at()).alias("d")), [(1, 5000), (2, 140), (3, 90_000), (4, 10)])


def test_delay_past_max_delay_is_flagged_not_dropped(spark):
    pol = policies({"orders": {"maxDelayMs": 60_000}})
    df = spark.createDataFrame([row(1, delay=60_000), row(2, delay=60_001), row(3, topic="x", delay=10**9),
                                row(4, topic="x", delay=41 * 24 * 3600 * 1000)], COLS)
    assert_rows(df.select("id", delay_exceeds_max(pol).alias("f")), [(1, False), (2, True), (3, False), (4, True)])


def test_priority_rules(spark):
    pol = policies({"amqp.*": {"maxPriority": 3}})
    df = spark.createDataFrame([
        row(1, priority=7, headers={"priority": "7"}),
        row(2, priority=0, headers={"priority": "0"}),            # outside 1..10: 5
        row(3, priority=11, headers={"priority": "11"}),          # outside 1..10: 5
        row(4, topic="amqp.q", priority=9, headers={"priority": "9"}),  # above maxPriority: the max
        row(5, topic="amqp.q", priority=5),                       # missing in AMQP mode: 0
        row(6, topic="amqp.q", priority=2, headers={"priority": "2"}),
    ], COLS)
    # The effective priority, and the stored one, which never changes.
    assert_rows(df.select("id", effective_priority(pol).alias("p"), "priority"),
                [(1, 7, 7), (2, 5, 0), (3, 5, 11), (4, 3, 9), (5, 0, 5), (6, 2, 2)])


@pytest.mark.parametrize(("t", "states"), [
    (15, ["scheduled", "scheduled", "ready", "ready"]),
    (400, ["scheduled", "expired", "ready", "ready"]),
    (2000, ["ready", "expired", "ready", "expired"]),
])
def test_state_at_replays_consistently(spark, t, states):
    pol = policies({"orders": {"messageTtlMs": 1500}})
    df = spark.createDataFrame([
        row(1, topic="x", delay=1000),                              # scheduled, then ready
        row(2, topic="x", delay=1000, properties={"expiration": "300"}),  # expires before it is deliverable
        row(3, topic="x", store=0),                                 # ready, never expires
        row(4),                                                     # ready, then expired (queue TTL)
    ], COLS)
    assert_rows(df.orderBy("id").select("id", state_at(at(t), pol).alias("s")), list(zip([1, 2, 3, 4], states)))
    assert df.where(stored_by(at(5))).count() == 1  # a replay at T sees only what was stored by T (row 3)


@pytest.mark.parametrize(("doc", "key"), [
    ({"orders": {"messageTtlMs": -1}}, "policies.orders.messageTtlMs"),
    ({"orders": {"maxLength": "ten"}}, "policies.orders.maxLength"),
    ({"orders": {"ttl": 5}}, "policies.orders.ttl: unknown key"),
    ({"orders": {"overflow": "drop-tail"}}, "policies.orders.overflow"),
])
def test_policy_errors_name_the_key(doc, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        S.from_dict({"policies": doc})


def test_a_dead_letter_loop_is_valid_configuration():
    s = S.from_dict({"policies": {"a": {"deadLetterTopic": "a"}, "b": {"deadLetterTopic": "c"},
                                  "c": {"deadLetterTopic": "b", "messageTtlMs": 0}}})
    assert s.policies["a"].deadLetterTopic == "a" and s.policies["c"].overflow == "drop-head"


def test_message_type_from_the_source_else_from_the_headers(spark):
    df = spark.createDataFrame([
        ("TRANSACTION", None, None, None, None), (None, 5000, None, None, None), (None, None, 1, None, None),
        (None, None, None, "tx-1", None), (None, None, None, None, "shard-7"), (None, 0, None, None, None),
    ], "messageType string, delayTime bigint, deliver int, transactionId string, messageKey string").withColumn(
        "startDeliverTime", F.when(F.col("deliver").isNotNull(), F.current_timestamp()))
    assert_rows(df.select(message_type().alias("t")),
                [("TRANSACTION",), ("DELAY",), ("DELAY",), ("TRANSACTION",), ("FIFO",), ("NORMAL",)])


def test_policy_values_agree_with_the_python_lookup_for_random_policies(spark):
    # policy_value leaves out branches that give the default unless they shadow a glob: the
    # Spark column must still pick what policy_for (the plain most-specific match) picks.
    rng = random.Random(7)
    names = ["a", "ab", "a.b", "b", "orders", "orders.dlq", "a*", "*", "orders*", "*.dlq", "?b", "a.*"]
    topics = ["a", "ab", "a.b", "b", "orders", "orders.dlq", "ac", "x.dlq", "bb", "c", "orders.eu"]
    cases = []
    for _ in range(30):
        pol = {n: {k: rng.choice(values) for k, values in (("messageTtlMs", [None, 1, 2]), ("maxLength", [None, 5]))}
               for n in rng.sample(names, rng.randint(1, len(names)))}
        cases.append({n: {k: v for k, v in p.items() if v is not None} for n, p in pol.items()})
    df = spark.createDataFrame([(t,) for t in topics], "topic string")
    got = df.select("topic", *[policy_value(p, key, default).alias(f"{i}-{key}") for i, p in enumerate(cases)
                               for key, default in (("messageTtlMs", None), ("maxLength", 0))]).collect()
    for row in got:
        for i, p in enumerate(cases):
            for key, default in (("messageTtlMs", None), ("maxLength", 0)):
                want = policy_for(p, row["topic"]).get(key, default)
                assert row[f"{i}-{key}"] == want, (p, row["topic"], key)
