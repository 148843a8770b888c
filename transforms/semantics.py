"""Delivery semantics as Spark columns: priority, delivery time, expiry, state at ``T``.

docs/semantics.md §1-4 and §7 (without dead-lettering). Every helper is a pure Column
expression built from Spark built-ins; topic policies come in as plain mappings (pattern ->
policy fields, as ``msglake.pipelines.settings.TopicPolicy.model_dump()`` gives them) and the
evaluation time ``as_of`` is a parameter: nothing here reads the clock.
"""
from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

import orjson

from pyspark.sql import Column, functions as F

#: OpenMessaging priority range and default.
MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY = 1, 10, 5
#: semantics.md §1: the default ``maxDelayMs`` (40 days).
DEFAULT_MAX_DELAY_MS = 40 * 24 * 3600 * 1000

Policies = Mapping[str, Mapping]


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _ordered(policies: Policies) -> list[tuple[str, Mapping]]:
    """Most specific first: exact names, then patterns with more literal characters, then file order."""
    def literal(p: str) -> int:
        return len(p) - sum(p.count(c) for c in "*?[]")

    items = list(policies.items())
    return sorted(items, key=lambda kv: (_is_glob(kv[0]), -literal(kv[0]), items.index(kv)))


def _matches(pattern: str, topic: Column) -> Column:
    if not _is_glob(pattern):
        return topic == F.lit(pattern)
    stem = pattern.rstrip("*")
    if not _is_glob(stem):
        # "orders*", the usual glob, is a prefix: compared in place, where rlike makes a Java
        # string of every row's topic (1.19M rows on two cores, benchmarks/bench_rules.py: 0.29 s
        # by rlike, 0.20 s by startswith, about what counting the rows alone takes).
        return topic.startswith(stem)
    # rlike finds the pattern anywhere, where Python's re.match (policy_for) anchors it at the
    # start: anchor it, and end it with Java's \z (Python's \Z; Java's \Z allows a final newline).
    regex = fnmatch.translate(pattern)
    return topic.rlike("^" + (regex[:-2] + "\\z" if regex.endswith("\\Z") else regex))


def policy_for(policies: Policies, topic: str) -> Mapping:
    """The policy of ``topic`` in Python: the same most-specific match as :func:`policy_value`."""
    for pattern, policy in _ordered(policies):
        if (re.match(fnmatch.translate(pattern), topic) if _is_glob(pattern) else pattern == topic):
            return policy
    return {}


#: policy_value's columns by (JVM, policies, key, default), each with the JVM view it was made in:
#: see :func:`policy_value`.
_MADE: dict[tuple, tuple[object, Column]] = {}
_MADE_MAX = 4096


def policy_value(policies: Policies, key: str, default=None, topic: Column | None = None) -> Column:
    """The policy field ``key`` for each row's topic (the most specific matching policy's), else ``default``.

    A matching policy that leaves ``key`` unset gives ``default``: policies do not inherit
    from less specific patterns.

    The column for the ``topic`` column is made once per policies, key and default, and then
    reused (a Column is an expression, not bound to a frame): the evaluation rounds ask for the
    same dozen every round, and with many policies each one cost hundreds of calls to the JVM
    (the property test's 73 policies: ~300 calls, 20-35 ms each).
    """
    if topic is not None:
        return _policy_value(policies, key, default, topic)
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    try:
        # in file order, not sorted: between globs equally specific, the earlier one wins
        made = (id(jvm), orjson.dumps(policies), key, orjson.dumps(default))
    except TypeError:  # a value JSON cannot say: make it each time
        return _policy_value(policies, key, default, F.col("topic"))
    # The same id can be a later JVM view's once the first is gone (a session stopped and
    # another started): a column is reused only in the view it was made in.
    if made not in _MADE or _MADE[made][0] is not jvm:
        if len(_MADE) >= _MADE_MAX:
            _MADE.clear()
        _MADE[made] = (jvm, _policy_value(policies, key, default, F.col("topic")))
    return _MADE[made][1]


def _policy_value(policies: Policies, key: str, default, topic: Column) -> Column:
    branches = _branches(policies, key, default)
    # Exact names come first (the most specific). Past one value, they are one map literal
    # looked up by topic instead of a branch per value: with a policy per topic, a branch per
    # name made every plan and every compiled class of an evaluation grow with the topics
    # (the property test's 60 scenarios, ~180 topics: see :func:`_exact_lookup`).
    exact = [(names, value) for names, value in branches if not _is_glob(names[0])]
    chain = None
    if len(exact) > 1:
        lookup = _exact_lookup(exact)
        chain = F.when(F.map_contains_key(lookup, topic), F.element_at(lookup, topic))
        branches = branches[len(exact):]
    for names, value in branches:
        cond = _matches(names[0], topic) if len(names) == 1 else topic.isin(*names)
        chain = F.when(cond, F.lit(value)) if chain is None else chain.when(cond, F.lit(value))
    return F.lit(default) if chain is None else chain.otherwise(F.lit(default))


def _exact_lookup(exact: list[tuple[list[str], object]]) -> Column:
    """A map literal, exact topic name -> value (the default where a name only shadows a glob).

    Spark folds it into one constant when it optimizes the plan, so the expression stays one
    node however many topics have policies, where a ``CASE WHEN`` had a branch per value.
    """
    pairs = [(name, value) for names, value in exact for name in names]
    return F.map_from_arrays(F.array(*[F.lit(n) for n, _ in pairs]), F.array(*[F.lit(v) for _, v in pairs]))


def _branches(policies: Policies, key: str, default) -> list[tuple[list[str], object]]:
    """The branches :func:`policy_value` needs for ``key``, most specific first, as (patterns, value).

    A policy that gives the default is left out unless it shadows a less specific pattern that
    could match the same topic with another value; neighbouring exact names with one value share
    a branch. The evaluation rounds plan these expressions again and again, and a branch per
    policy and key made the plans several times larger (planning, not running, is most of a
    small evaluation).

    >>> [(names, v) for names, v in _branches({"a": {"x": 1}, "b": {"x": 1}, "c": {}, "d*": {"x": 2}}, "x", None)]
    [(['a', 'b'], 1), (['d*'], 2)]
    >>> _branches({"d1": {}, "d*": {"x": 2}}, "x", None)
    [(['d1'], None), (['d*'], 2)]
    """
    ordered = [(p, default if pol.get(key) is None else pol.get(key)) for p, pol in _ordered(policies)]
    out: list[tuple[list[str], object]] = []
    for i, (pattern, value) in enumerate(ordered):
        if value == default and not any(v != default and _may_overlap(pattern, q) for q, v in ordered[i + 1:]):
            continue
        if out and out[-1][1] == value and not _is_glob(pattern) and not _is_glob(out[-1][0][-1]):
            out[-1][0].append(pattern)
        else:
            out.append(([pattern], value))
    return out


def _may_overlap(specific: str, other: str) -> bool:
    """Whether some topic could match both patterns (exact names are decided, globs assumed to)."""
    if not _is_glob(specific):
        return specific == other or (_is_glob(other) and re.match(fnmatch.translate(other), specific) is not None)
    return _is_glob(other)


def plus_ms(ts: Column, ms: Column) -> Column:
    """``ts`` + ``ms`` milliseconds, exact to the microsecond."""
    return F.timestamp_micros(F.unix_micros(ts) + ms.cast("bigint") * 1000)


def message_type() -> Column:
    """``NORMAL``, ``FIFO``, ``DELAY`` or ``TRANSACTION`` (RocketMQ's TopicMessageType).

    The source's own value when it has one (RocketMQ records carry it); else derived from the
    headers: a delay or absolute delivery time, a transaction id, a sharding key (ordered
    delivery), in that order.
    """
    delayed = F.col("startDeliverTime").isNotNull() | (F.coalesce(F.col("delayTime"), F.lit(0)) > 0)
    derived = (
        F.when(delayed, F.lit("DELAY"))
        .when(F.col("transactionId").isNotNull(), F.lit("TRANSACTION"))
        .when(F.col("messageKey").isNotNull(), F.lit("FIFO"))
        .otherwise(F.lit("NORMAL"))
    )
    return F.coalesce(F.col("messageType"), derived)


def effective_priority(policies: Policies) -> Column:
    """Priority used for ordering (§2); the stored column is never changed.

    OpenMessaging topics: 1..10 as stored, anything else 5. Topics whose policy sets
    ``maxPriority`` (AMQP style): a missing priority is 0, one above the maximum is the maximum.
    """
    given = F.col("headers")["priority"].isNotNull()
    stored = F.col("priority")
    max_priority = policy_value(policies, "maxPriority")
    openmessaging = F.when(stored.between(MIN_PRIORITY, MAX_PRIORITY), stored).otherwise(F.lit(DEFAULT_PRIORITY))
    amqp = F.when(~given, F.lit(0)).when(stored > max_priority, max_priority).when(stored < 0, F.lit(0)).otherwise(stored)
    return F.when(max_priority.isNull(), openmessaging).otherwise(amqp).cast("int")


def deliver_at() -> Column:
    """When the message becomes deliverable (§3).

    ``startDeliverTime`` when the source gives an absolute time, else ``coalesce(bornTimestamp,
    storeTimestamp) + delayTime``, else ``storeTimestamp``.
    """
    born = F.coalesce(F.col("bornTimestamp"), F.col("storeTimestamp"))
    return F.coalesce(F.col("startDeliverTime"), plus_ms(born, F.col("delayTime")), F.col("storeTimestamp"))


def delay_exceeds_max(policies: Policies) -> Column:
    """True where the delay passes the topic's ``maxDelayMs`` (a quality flag; the message is kept)."""
    born = F.coalesce(F.col("bornTimestamp"), F.col("storeTimestamp"))
    delay_ms = F.unix_millis(deliver_at()) - F.unix_millis(born)
    return F.coalesce(delay_ms > policy_value(policies, "maxDelayMs", DEFAULT_MAX_DELAY_MS), F.lit(False))


def expire_time_ignored() -> Column:
    """True where ``expireTime`` is at or before ``bornTimestamp``: such a message never expires by it (§4)."""
    return F.coalesce(F.col("expireTime") <= F.col("bornTimestamp"), F.lit(False))


def own_expire_at() -> Column:
    """The message's own expiries (§4): ``expireTime`` (unless at or before ``bornTimestamp``) and
    ``storeTimestamp +`` its AMQP ``expiration`` property (ms; "0" expires at once unless
    delivered at once); null when it has neither."""
    expiration = F.col("properties")["expiration"]
    expiration_ms = F.when(expiration.rlike("^[0-9]{1,15}$"), expiration.cast("bigint"))
    return F.least(
        F.when(~expire_time_ignored(), F.col("expireTime")),
        F.when(expiration_ms.isNotNull(), plus_ms(F.col("storeTimestamp"), expiration_ms)),
    )


def expire_at(policies: Policies) -> Column:
    """The earliest expiry that applies (§4), null when none does: the message's own
    (:func:`own_expire_at`) and ``storeTimestamp + messageTtlMs`` of its topic."""
    ttl = policy_value(policies, "messageTtlMs")
    return F.least(own_expire_at(), F.when(ttl.isNotNull(), plus_ms(F.col("storeTimestamp"), ttl)))


def _time(as_of) -> Column:
    return as_of if isinstance(as_of, Column) else F.lit(as_of).cast("timestamp")


def stored_by(as_of) -> Column:
    """True for messages the broker had stored by ``as_of``: the only ones that exist at that time."""
    return F.col("storeTimestamp") <= _time(as_of)


def state_at(as_of, policies: Policies) -> Column:
    """``scheduled``, ``expired`` or ``ready`` at ``as_of`` (§7, before dead-lettering).

    For messages stored by ``as_of`` (:func:`stored_by`): one not yet deliverable is
    ``scheduled``; one whose expiry has passed is ``expired`` (also when it expired before it
    ever became deliverable); otherwise ``ready``.
    """
    t = _time(as_of)
    expires = expire_at(policies)
    return (
        F.when(expires <= t, F.lit("expired"))
        .when(deliver_at() > t, F.lit("scheduled"))
        .otherwise(F.lit("ready"))
    )
