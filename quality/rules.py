"""Row checks on decoded messages: one Spark built-in expression per rule.

Each rule gives, for every row, the reason it is violated (a string) or null. The ingest
sink (pipelines/sinks.py) applies them to every micro-batch according to the rule's level
from ``conf/`` (``quality.rules``):

- ``warn``: the row is written to ``messages`` and counted;
- ``quarantine``: the row goes to ``quarantine`` with its raw bytes, the rule and the reason;
- ``fail``: the job stops before the batch is written (the checkpoint does not move, so a
  re-run after fixing the data or the setting starts from that batch);
- ``off``: not evaluated.

The data-quality report (quality/suites.py) checks the same expressions on the tables, so a
rule is defined once here.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F

from msglake.transforms.semantics import MAX_PRIORITY, MIN_PRIORITY, Policies, delay_exceeds_max, policy_value

LEVELS = ("off", "warn", "quarantine", "fail")

#: RocketMQ message ids: the broker's offset msgId and the client UNIQ_KEY are 16 or 28 bytes
#: in hex (IPv4 / IPv6), the proxy's v1 UNIQ_KEY 17 bytes (docs/rocketmq-commitlog.md §4).
ROCKETMQ_ID = r"^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{34}|[0-9A-Fa-f]{56})$"
#: NSQ message ids as msglake writes them: the 8-byte id in decimal.
NSQ_ID = r"^[0-9]{1,20}$"
#: Topic names the brokers accept: nsqd's ``protocol.IsValidTopicName`` (1-64 of [.a-zA-Z0-9_-],
#: optionally ``#ephemeral``) and RocketMQ's ``TopicValidator`` (1-127 of [%|a-zA-Z0-9_-],
#: up to 255 for %RETRY%/%DLQ% topics).
NSQ_TOPIC = r"^[.a-zA-Z0-9_-]+(#ephemeral)?$"
ROCKETMQ_TOPIC = r"^[%|a-zA-Z0-9_-]+$"


@dataclass(frozen=True)
class RuleContext:
    """What the rules need besides the row: limits and topic policies from the settings."""

    policies: Policies
    max_message_bytes: int = 4 << 20
    clock_skew_ms: int = 60_000


@dataclass(frozen=True)
class Rule:
    name: str
    default: str
    description: str
    #: The rule's reason (string) for a violating row, null otherwise.
    check: Callable[[RuleContext], Column]
    #: The column a report shows the rule against.
    column: str | None = None
    #: Whether the rule reads only what every copy of a message shares by its retry key (topic,
    #: source format): it then holds all copies of a key or none, and retry marking need not
    #: find out which copies it holds before deciding (``pipelines.io.sinks``).
    same_for_copies: bool = False


def _priority(ctx: RuleContext) -> Column:
    # Topics whose policy sets maxPriority are AMQP style: 0..maxPriority is the valid range, and
    # only a priority the producer gave counts (a missing one is stored as the default 5).
    amqp_max = policy_value(ctx.policies, "maxPriority")
    low = F.when(amqp_max.isNull(), F.lit(MIN_PRIORITY)).otherwise(F.lit(0))
    high = F.coalesce(amqp_max, F.lit(MAX_PRIORITY))
    given = amqp_max.isNull() | F.col("headers")["priority"].isNotNull()
    bad = given & ((F.col("priority") < low) | (F.col("priority") > high))
    return F.when(bad, F.format_string("priority %d outside %d..%d", F.col("priority"), low, high))


def _expire_before_born(ctx: RuleContext) -> Column:
    bad = F.col("expireTime") <= F.col("bornTimestamp")
    return F.when(bad, F.format_string("expireTime %s is not after bornTimestamp %s",
                                       F.col("expireTime").cast("string"), F.col("bornTimestamp").cast("string")))


def _store_before_born(ctx: RuleContext) -> Column:
    early_ms = F.unix_millis(F.col("bornTimestamp")) - F.unix_millis(F.col("storeTimestamp"))
    return F.when(early_ms > ctx.clock_skew_ms,
                  F.format_string("stored %d ms before it was born (allowed skew %d ms)", early_ms,
                                  F.lit(ctx.clock_skew_ms)))


def _delay(ctx: RuleContext) -> Column:
    max_delay = policy_value(ctx.policies, "maxDelayMs")
    return F.when(delay_exceeds_max(ctx.policies),
                  F.format_string("delay above the topic's maxDelayMs %s",
                                  F.coalesce(max_delay.cast("string"), F.lit("(default 40 days)"))))


def _body_size(ctx: RuleContext) -> Column:
    return F.when(F.col("bodySize") > ctx.max_message_bytes,
                  F.format_string("body of %d bytes above the maximum message size %d", F.col("bodySize"),
                                  F.lit(ctx.max_message_bytes)))


def rocketmq_id(value: Column) -> Column:
    """True where ``value`` is a RocketMQ id (:data:`ROCKETMQ_ID`: 32, 34 or 56 hex digits), False
    elsewhere, a null included.

    By its length and ``unhex``, which is null for a character that is no hex digit: not by the
    regular expression, which Spark matches on a Java string made of every row's value: the two
    id checks of 1.19M RocketMQ rows on two cores took 0.99 s by ``rlike``, 0.28 s this way, where
    counting the rows alone takes 0.21 s (``benchmarks/bench_rules.py``). Stricter than the
    expression in one way: Java's ``$`` also matches before a final line break (which no id has),
    so a count by ``rlike(ROCKETMQ_ID)`` can differ from this rule's for such values only."""
    return F.octet_length(value).isin(32, 34, 56) & F.unhex(value).isNotNull()


def _ids(ctx: RuleContext) -> Column:
    rocketmq = F.col("sourceFormat") == "rocketmq_commitlog"
    message_id_ok = F.when(rocketmq, rocketmq_id(F.col("messageId"))).otherwise(F.col("messageId").rlike(NSQ_ID))
    unique_id_ok = F.col("uniqueId").isNull() | ~rocketmq | rocketmq_id(F.col("uniqueId"))
    return (
        F.when(F.col("messageId").isNull(), F.lit("messageId is missing"))
        .when(~message_id_ok, F.format_string("malformed messageId %s", F.col("messageId")))
        .when(~unique_id_ok, F.format_string("malformed UNIQ_KEY %s (expected 32, 34 or 56 hex digits)",
                                             F.col("uniqueId")))
    )


def _topic(ctx: RuleContext) -> Column:
    rocketmq = F.col("sourceFormat") == "rocketmq_commitlog"
    retry_or_dlq = F.col("topic").startswith("%RETRY%") | F.col("topic").startswith("%DLQ%")
    max_len = F.when(rocketmq & retry_or_dlq, F.lit(255)).when(rocketmq, F.lit(127)).otherwise(F.lit(64))
    ok = F.when(rocketmq, F.col("topic").rlike(ROCKETMQ_TOPIC)).otherwise(F.col("topic").rlike(NSQ_TOPIC))
    return (
        F.when(~ok, F.format_string("topic name %s has characters the broker does not allow", F.col("topic")))
        .when(F.length("topic") > max_len,
              F.format_string("topic name of %d characters, above the broker's %d", F.length("topic"), max_len))
    )


#: Every rule, by name, with its default level.
RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        Rule("priority_range", "warn", "priority outside 1..10 (0..maxPriority for AMQP-style topics)",
             _priority, "priority"),
        Rule("expire_before_born", "warn", "expireTime at or before bornTimestamp", _expire_before_born,
             "expireTime"),
        Rule("store_before_born", "warn", "storeTimestamp before bornTimestamp minus the allowed clock skew",
             _store_before_born, "storeTimestamp"),
        Rule("delay_above_max", "warn", "delay above the topic's maxDelayMs", _delay, "delayTime"),
        Rule("body_too_large", "warn", "body above the maximum message size (quality.maxMessageBytes)",
             _body_size, "bodySize"),
        Rule("malformed_id", "warn", "messageId / UNIQ_KEY not in the broker's format (length, hex digits)",
             _ids, "messageId"),
        Rule("topic_name", "quarantine", "topic name with characters or a length the broker does not allow",
             _topic, "topic", same_for_copies=True),
    )
}

CHECKS_COLUMN = "_checks"
_CHECKS_TYPE = "array<struct<rule:string,level:string,reason:string>>"


def active(levels: Mapping[str, str]) -> dict[str, str]:
    """Rule name -> level for the rules that are not ``off`` (a missing name takes its default)."""
    chosen = {name: levels.get(name, rule.default) for name, rule in RULES.items()}
    return {name: level for name, level in chosen.items() if level != "off"}


def violations(ctx: RuleContext, levels: Mapping[str, str]) -> Column:
    """The rules a row violates: ``array<struct<rule, level, reason>>``, empty when it passes.

    Exactly the rules of ``levels`` that are not ``off`` are evaluated: a missing rule is not
    (pass settings' ``quality.levels()`` or :func:`active` levels, which have every default).
    """
    rules = {name: level for name, level in levels.items() if level != "off"}
    if not rules:
        return F.array().cast(_CHECKS_TYPE)
    # A one-element array per violated rule, concatenated: Spark compiles these, while a
    # filter() over all the rules' structs runs a lambda per row, interpreted (with the lookups
    # below, the rules and a batch's counts took 4.1-4.4 s per 1.19M rows, now 1.7-2.0 s).
    return F.concat(*[_hit(name, level, RULES[name].check(ctx)) for name, level in rules.items()])


def _hit(name: str, level: str, reason: Column) -> Column:
    """``[struct(rule, level, reason)]`` where ``reason`` is not null, else ``[]``."""
    entry = F.struct(F.lit(name).alias("rule"), F.lit(level).alias("level"), reason.alias("reason"))
    return F.when(reason.isNotNull(), F.array(entry)).otherwise(F.array().cast(_CHECKS_TYPE))


def with_checks(df: DataFrame, ctx: RuleContext, levels: Mapping[str, str]) -> DataFrame:
    """``df`` with the ``_checks`` column of :func:`violations`."""
    return df.withColumn(CHECKS_COLUMN, violations(ctx, levels))


def hits(level: str) -> Column:
    """The checks of ``_checks`` at ``level``."""
    return F.filter(F.col(CHECKS_COLUMN), lambda c: c["level"] == level)


def matched(rule: str) -> Column:
    """True where ``rule`` is among the row's ``_checks``."""
    return F.array_contains(F.col(CHECKS_COLUMN)["rule"], rule)  # compiled, unlike exists()


def held() -> Column:
    """True where a quarantine-level rule matched (the row leaves ``messages``)."""
    return F.array_contains(F.col(CHECKS_COLUMN)["level"], "quarantine")


def held_reason() -> Column:
    """``rule: reason`` of every quarantine-level match, joined with ``; ``."""
    return F.array_join(F.transform(hits("quarantine"), lambda c: F.concat_ws(": ", c["rule"], c["reason"])), "; ")


def first_held_rule() -> Column:
    return F.get(hits("quarantine"), 0)["rule"]
