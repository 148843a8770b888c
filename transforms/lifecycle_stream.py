"""The semantics engine as a stream: event-time timers release scheduled messages and expire the rest.

One key per message as published (its hop-0 ``rowId``). Its state is the copy it currently
is: on arrival the processor logs ``stored`` (and ``scheduled`` when delayed) and registers
event-time timers at ``deliverAt`` and ``expireAt``; when the watermark passes them it logs
``ready``, or the copy's death. A death routed to a dead-letter topic makes the next copy
(logged as ``stored``/``ready``, emitted as a ``dead_letters`` row) under the same key, with a
timer for its new topic's TTL, so chains of dead-letter topics, cycles and the hop bound work
as in :func:`msglake.transforms.lifecycle.evaluate`, which computes the same events in bulk.

What a stream cannot know when it runs, it leaves to ``msglake replay``: consumer events
and offsets (consumption, rejections, requeues), overflow (``maxLength``), per-message expiry
at the head only, and RocketMQ retry chains. For every other rule the rows equal a replay's
at the watermark (tests/pipelines/test_semantics_stream.py checks it).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import orjson
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from msglake.transforms.lifecycle import copy_row_id, record_death_entry
from msglake.transforms.semantics import policy_for

#: The processor's output: log events (kind "event") and dead-lettered copies (kind "copy").
OUTPUT_SCHEMA = (
    "kind string, rowId string, uniqueId string, parentRowId string, hop int, topic string, partition int, "
    "event string, timeUs bigint, seq int, state string, reason string, storeUs bigint, deliverUs bigint, "
    "expireUs bigint, effectivePriority int, messageType string, bodySize int, exchange string, "
    "routingKey string, cc array<string>, deathHistory string, firstDeathQueue string, firstDeathReason string, "
    "firstDeathExchange string"
)
_FIELDS = [f.split(" ")[0] for f in OUTPUT_SCHEMA.split(", ")]
_STATE_SCHEMA = "doc string"
_COPY_KEYS = ("rowId", "uniqueId", "parentRowId", "hop", "topic", "partition", "storeUs", "deliverUs", "expireUs",
              "effectivePriority", "messageType", "bodySize", "exchange", "routingKey", "cc", "firstDeathQueue",
              "firstDeathReason", "firstDeathExchange")


def _timer_ms(us: int) -> int:
    return -(-us // 1000)  # the first millisecond at or after the instant


class LifecycleProcessor(StatefulProcessor):
    """``transformWithState`` processor (event time); see the module docstring."""

    def __init__(self, policies: Mapping[str, Mapping], topics: list[str], max_hops: int):
        self.policies, self.topics, self.max_hops = policies, set(topics), max_hops

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("copy", _STATE_SCHEMA)

    def close(self) -> None:
        pass

    # -- events -----------------------------------------------------------------------------
    def _out(self, c: dict, kind: str, **extra) -> Row:
        doc = {k: c.get(k) for k in _COPY_KEYS}
        doc["deathHistory"] = orjson.dumps(c["history"]).decode()
        doc.update(kind=kind, **extra)
        return Row(**{f: doc.get(f) for f in _FIELDS})

    def _event(self, c: dict, event: str, time_us: int, state: str, reason: str | None = None) -> Row:
        row = self._out(c, "event", event=event, timeUs=time_us, seq=c["seq"], state=state, reason=reason)
        c["seq"] += 1
        return row

    def _arrive(self, c: dict, watermark_ms: int) -> Iterator[Row]:
        """A copy enters its topic: log it, then settle what is already due and set timers for the rest."""
        c["released"] = c["deliverUs"] <= c["storeUs"]
        yield self._event(c, "stored", c["storeUs"], "ready" if c["released"] else "scheduled")
        if not c["released"]:
            yield self._event(c, "scheduled", c["storeUs"], "scheduled")
        elif c["expireUs"] is None or c["storeUs"] <= c["expireUs"]:
            yield self._event(c, "ready", c["storeUs"], "ready")
        limit = policy_for(self.policies, c["topic"]).get("maxDeliveries")
        if limit is not None and c["deliveryCount"] > limit:
            yield from self._die(c, "delivery_limit", c["storeUs"], watermark_ms)
            return
        yield from self._schedule(c, watermark_ms)

    def _schedule(self, c: dict, watermark_ms: int) -> Iterator[Row]:
        pending = [us for us in (None if c["released"] else c["deliverUs"], c["expireUs"]) if us is not None]
        if not pending:
            self.state.clear()  # nothing more can happen to it in a stream
            return
        due = _timer_ms(min(pending))
        if due <= watermark_ms:  # already passed (a late row, a zero TTL): settle it now
            yield from self._fire(c, due, watermark_ms)
            return
        c["timer"] = due
        self.handle.registerTimer(due)
        self.state.update((orjson.dumps(c).decode(),))

    def _fire(self, c: dict, due_ms: int, watermark_ms: int) -> Iterator[Row]:
        c.pop("timer", None)
        expire = c["expireUs"]
        if not c["released"] and _timer_ms(c["deliverUs"]) <= due_ms:
            c["released"] = True
            if expire is None or c["deliverUs"] <= expire:
                yield self._event(c, "ready", c["deliverUs"], "ready")
        if expire is not None and _timer_ms(expire) <= due_ms:
            yield from self._die(c, "expired", expire, watermark_ms)
            return
        yield from self._schedule(c, watermark_ms)

    def _die(self, c: dict, reason: str, time_us: int, watermark_ms: int) -> Iterator[Row]:
        """semantics.md §5 for one copy: the same decisions as ``msglake.transforms.lifecycle.fates``."""
        policy = policy_for(self.policies, c["topic"])
        target = policy.get("deadLetterTopic")
        entry = {"queue": c["topic"], "reason": reason, "count": 1, "time": time_us, "exchange": c["exchange"],
                 "routingKeys": [c["routingKey"], *c["cc"]], "originalExpiration": c["expiration"]}
        history = record_death_entry(c["history"], entry)
        if target is None:
            state, why = ("expired", "expired") if reason == "expired" else ("dropped", reason)
        elif target not in self.topics:
            state, why = "dropped", "missing_target"
        elif reason in ("expired", "maxlen") and any(e["queue"] == target for e in history) and not any(
                e["reason"] == "rejected" for e in history):
            state, why = "dropped", "cycle"
        elif c["hop"] >= self.max_hops:
            state, why = "dropped", "hop_limit"
        else:
            state, why = "dead_lettered", reason
        yield self._event(c, state, time_us, state, why)
        if state != "dead_lettered":
            self.state.clear()
            return
        dlrk = policy.get("deadLetterRoutingKey")
        ttl = policy_for(self.policies, target).get("messageTtlMs")
        copy = {
            "rowId": copy_row_id(c["rowId"], target), "uniqueId": c["uniqueId"], "parentRowId": c["rowId"],
            "hop": c["hop"] + 1, "topic": target, "partition": 0, "storeUs": time_us, "deliverUs": time_us,
            "expireUs": None if ttl is None else time_us + ttl * 1000, "expiration": None,
            "effectivePriority": c["effectivePriority"], "messageType": c["messageType"], "bodySize": c["bodySize"],
            "exchange": policy.get("deadLetterExchange") or target,
            "routingKey": dlrk if dlrk is not None else c["routingKey"], "cc": [] if dlrk is not None else c["cc"],
            "history": history, "deliveryCount": 0, "seq": 0,
            "firstDeathQueue": c["firstDeathQueue"] or history[-1]["queue"],
            "firstDeathReason": c["firstDeathReason"] or reason,
            "firstDeathExchange": c["firstDeathExchange"] or c["exchange"],
        }
        yield self._out(copy, "copy")
        yield from self._arrive(copy, watermark_ms)

    # -- StatefulProcessor ------------------------------------------------------------------
    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        watermark = timerValues.getCurrentWatermarkInMs()
        for r in rows:
            if self.state.exists():
                continue  # the same record again: it has its state already
            c = r.asDict()
            del c["storeTimestamp"]  # the watermark's column; the processor works in microseconds
            c.update(parentRowId=None, hop=0, history=[], seq=0, firstDeathQueue=None, firstDeathReason=None,
                     firstDeathExchange=None, cc=list(c["cc"] or []))
            yield from self._arrive(c, watermark)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        if not self.state.exists():
            return
        c = orjson.loads(self.state.get()[0])
        yield from self._fire(c, expiredTimerInfo.getExpiryTimeInMs(), timerValues.getCurrentWatermarkInMs())
