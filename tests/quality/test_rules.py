"""Each quality rule on valid, invalid and missing values (quality/rules.py)."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from msglake.errors import ConfigError
from msglake.pipelines import settings as S
from msglake.pipelines.io.sinks import DeltaSink
from msglake.quality import rules as R

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 1, tzinfo=UTC)
COLS = ("case string, sourceFormat string, topic string, messageId string, uniqueId string, priority int, "
        "bornTimestamp timestamp, storeTimestamp timestamp, expireTime timestamp, delayTime bigint, "
        "startDeliverTime timestamp, bodySize int, headers map<string,string>")
RMQ_ID = "645100FA00002A9F000000489A3AA09E"  # the broker's own test vector (rocketmq-commitlog.md)


def row(case, *, fmt="nsq_ext", topic="orders", mid="17", uid=None, priority=5, born=T0, store=T0, expire=None,
        delay=None, start=None, body=100, given=True):
    headers = {"priority": str(priority)} if given else {}
    return (case, fmt, topic, mid, uid, priority, born, store, expire, delay, start, body, headers)


def ms(n):
    return dt.timedelta(milliseconds=n)


#: case -> (row, the rule it must break or None, a fragment of the reason)
CASES = {
    "ok": (row("ok"), None, None),
    "ok-nulls": (row("ok-nulls", born=None, expire=None, delay=None, uid=None), None, None),
    "prio-0": (row("prio-0", priority=0), "priority_range", "priority 0 outside 1..10"),
    "prio-11": (row("prio-11", priority=11), "priority_range", "outside 1..10"),
    "prio-amqp-0": (row("prio-amqp-0", topic="amqp", priority=0), None, None),
    "prio-amqp-9": (row("prio-amqp-9", topic="amqp", priority=9), "priority_range", "priority 9 outside 0..8"),
    # No priority header: stored as the default 5, which an AMQP topic with maxPriority 3 reads as 0.
    "prio-amqp-missing": (row("prio-amqp-missing", topic="amqp3", given=False), None, None),
    "expire-eq-born": (row("expire-eq-born", expire=T0), "expire_before_born", "is not after bornTimestamp"),
    "expire-after": (row("expire-after", expire=T0 + ms(1)), None, None),
    "store-early": (row("store-early", born=T0 + ms(60_001)), "store_before_born",
                    "stored 60001 ms before it was born"),
    "store-in-skew": (row("store-in-skew", born=T0 + ms(60_000)), None, None),
    "delay-over": (row("delay-over", delay=3_600_001), "delay_above_max", "maxDelayMs 3600000"),
    "delay-at-max": (row("delay-at-max", delay=3_600_000), None, None),
    "delay-default-max": (row("delay-default-max", topic="other", delay=3_600_001), None, None),
    "body-big": (row("body-big", body=1001), "body_too_large", "body of 1001 bytes above"),
    "body-at-max": (row("body-at-max", body=1000), None, None),
    "nsq-id-hex": (row("nsq-id-hex", mid="0a1b"), "malformed_id", "malformed messageId 0a1b"),
    "rmq-ok": (row("rmq-ok", fmt="rocketmq_commitlog", mid=RMQ_ID, uid="0A01000710925EED1234023DCE7802F2"), None, None),
    "rmq-v1-uniq": (row("rmq-v1-uniq", fmt="rocketmq_commitlog", mid=RMQ_ID, uid="01" + "AB" * 16), None, None),
    "rmq-uniq-short": (row("rmq-uniq-short", fmt="rocketmq_commitlog", mid=RMQ_ID, uid="AFTER-2"), "malformed_id",
                       "malformed UNIQ_KEY AFTER-2"),
    "rmq-msgid-g": (row("rmq-msgid-g", fmt="rocketmq_commitlog", mid=RMQ_ID[:-1] + "G"), "malformed_id",
                    "malformed messageId"),
    "topic-space": (row("topic-space", topic="orders prod"), "topic_name", "characters the broker does not allow"),
    "topic-nsq-long": (row("topic-nsq-long", topic="t" * 65), "topic_name", "65 characters, above the broker's 64"),
    "topic-ephemeral": (row("topic-ephemeral", topic="chat#ephemeral"), None, None),
    "topic-rmq-pipe": (row("topic-rmq-pipe", fmt="rocketmq_commitlog", mid=RMQ_ID, topic="a|b"), None, None),
    "topic-rmq-dot": (row("topic-rmq-dot", fmt="rocketmq_commitlog", mid=RMQ_ID, topic="a.b"), "topic_name", "a.b"),
    "topic-rmq-dlq-200": (row("topic-rmq-dlq-200", fmt="rocketmq_commitlog", mid=RMQ_ID,
                              topic="%DLQ%" + "g" * 195), None, None),
    "topic-rmq-128": (row("topic-rmq-128", fmt="rocketmq_commitlog", mid=RMQ_ID, topic="g" * 128), "topic_name",
                      "above the broker's 127"),
}


@pytest.fixture(scope="module")
def checked(spark):
    settings = S.from_dict({
        "policies": {"orders*": {"maxDelayMs": 3_600_000}, "amqp": {"maxPriority": 8}, "amqp3": {"maxPriority": 3}},
        "quality": {"maxMessageBytes": 1000},
    })
    ctx = settings.quality.rule_context(settings.policies)
    df = spark.createDataFrame([c[0] for c in CASES.values()], COLS)
    rows = R.with_checks(df, ctx, settings.quality.levels()).select("case", R.CHECKS_COLUMN).collect()
    return {r["case"]: [(c["rule"], c["level"], c["reason"]) for c in r[R.CHECKS_COLUMN]] for r in rows}


@pytest.mark.parametrize("case", CASES)
def test_each_rule_on_valid_invalid_and_missing_values(checked, case):
    _, rule, fragment = CASES[case]
    got = checked[case]
    if rule is None:
        assert got == [], got
    else:
        assert [g[0] for g in got] == [rule], got
        assert fragment in got[0][2], got


def test_every_rule_has_a_failing_case():
    assert {c[1] for c in CASES.values()} - {None} == set(R.RULES)


def test_levels_come_from_settings_and_off_skips_a_rule(spark):
    settings = S.from_dict({"quality": {"rules": {"priority_range": "fail", "topic_name": "off"}}})
    levels = settings.quality.levels()
    assert R.active(levels)["priority_range"] == "fail" and "topic_name" not in R.active(levels)
    df = spark.createDataFrame([row("x", priority=0, topic="bad topic")], COLS)
    got = R.with_checks(df, settings.quality.rule_context({}), levels).select(
        F.col(R.CHECKS_COLUMN)["rule"].alias("rules"), F.col(R.CHECKS_COLUMN)["level"].alias("levels")).first()
    assert (got["rules"], got["levels"]) == (["priority_range"], ["fail"])
    # The ingest sink keeps an off rule off (a rule left out of a mapping would take its default).
    sink = DeltaSink("app", "unused", "unused", levels=levels)
    got = sink.checked(df).select(F.col(R.CHECKS_COLUMN)["rule"].alias("rules")).first()
    assert got["rules"] == ["priority_range"]


def test_unknown_rule_or_level_fails_naming_the_key():
    with pytest.raises(ConfigError) as e:
        S.from_dict({"quality": {"rules": {"priorty_range": "warn", "topic_name": "drop"}, "clockSkewMs": -1}})
    text = str(e.value)
    assert "quality.rules.priorty_range: unknown key" in text
    assert "quality.rules.topic_name: Input should be 'off', 'warn', 'quarantine' or 'fail'" in text
    assert "quality.clockSkewMs" in text


def test_rocketmq_id_check_is_the_documented_pattern(spark):
    # rocketmq_id decides by length and unhex, not by ROCKETMQ_ID's regex: both must agree with
    # the pattern (Python's fullmatch, where Java's $ would also pass a final line break).
    import random
    import re

    rng = random.Random(18)
    edge = ["", "0", "\n", RMQ_ID, RMQ_ID.lower(), RMQ_ID + "\n", " " + RMQ_ID, RMQ_ID[:-1] + "G", RMQ_ID[:-1] + "é",
            RMQ_ID[:-1] + "\uff10", "01" + "ab" * 16, "AB" * 28, "AB" * 28 + "0", "AB" * 15 + "A", "0x" + "0" * 30]
    made = []
    for _ in range(400):  # hex digits of a length near the valid ones, half with one other character in
        chars = [rng.choice("0123456789abcdefABCDEF") for _ in range(rng.choice([31, 32, 33, 34, 55, 56, 57]))]
        if rng.random() < 0.5:
            chars[rng.randrange(len(chars))] = rng.choice("gG -+.\n\u00e9\u0660\uff10\x00")
        made.append("".join(chars))
    values = edge + made
    df = spark.createDataFrame([(v,) for v in values] + [(None,)], "v string")
    got = {r["v"]: r["ok"] for r in df.select("v", R.rocketmq_id(F.col("v")).alias("ok")).collect()}
    pattern = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{34}|[0-9A-Fa-f]{56}")
    assert got.pop(None) is False  # no id at all is no RocketMQ id (rlike gave null)
    assert {v: bool(pattern.fullmatch(v)) for v in values} == got
    assert sum(got.values()) > 20  # the random values hit both answers
