"""Sample NSQ data paths with known contents: for the demo, the tests and the benchmarks.

:func:`generate` writes real-layout segments through :class:`NsqQueueWriter` and returns the
ground truth: every message it wrote, where, and every corrupt record with its location.
Deterministic for a seed (timestamps come from a fixed base, not the clock).
"""
from __future__ import annotations

import os
import random
import struct
import time

from msglake.samples.nsq_writer import NsqQueueWriter, encode_message
from msglake.samples.truth import Expected, ExpectedQuarantine, GroundTruth

BASE_NS = 1_793_500_000_000_000_000  # 2026-11-01T02:26:40Z, fixed so runs repeat exactly
TOPICS = (("orders", 2, True), ("payments", 1, True), ("audit.log-v2", 1, False))


class _Queue:
    def __init__(self, data_path, topic, partition, ext, truth, max_bytes):
        self.w = NsqQueueWriter(data_path, topic, partition, ext=ext, max_bytes_per_file=max_bytes)
        self.topic, self.partition, self.truth = topic, partition, truth

    def put(self, body: bytes, *, header=None, tag=None, trace_id=0, ts, ext=None, priority=5, trace=None):
        w = self.w.put(body, header=header, tag=tag, trace_id=trace_id, timestamp_ns=ts, ext=ext)
        tags = tag if tag else header.get("##client_dispatch_tag") if isinstance(header, dict) else None
        self.truth.messages.append(
            Expected(self.topic, self.partition, w.segment, w.position, w.virtual_offset,
                     str(self.w.next_id - 1), body, trace, tags or None, priority)
        )
        return w

    def bad(self, message: bytes, reason: str, framed: bytes | None = None):
        framed = framed if framed is not None else struct.pack(">i", len(message)) + message
        w = self.w.put_raw(framed)
        self.truth.quarantined.append(ExpectedQuarantine(w.segment, w.position, len(framed), reason))
        return w


def _message(rng: random.Random, i: int, q: _Queue, ts: int) -> None:
    body = rng.randbytes(rng.randint(100, 1000)) if rng.random() < 0.3 else (
        b'{"order":%d,"amount":%d,"note":"%s"}' % (i, rng.randint(1, 10**6), b"x" * rng.randint(50, 600))
    )
    kind = rng.random()
    if kind < 0.6 and q.w.ext:
        trace = str(rng.getrandbits(63))
        header = {
            "##trace_id": trace,
            "##client_dispatch_tag": rng.choice(["tagA", "tagB", "created", "paid"]),
            "bornTimestamp": (ts // 1_000_000) - rng.randint(1, 50),
            "bornHost": f"10.1.{rng.randint(0, 9)}.{rng.randint(1, 250)}:{rng.randint(30000, 60000)}",
            "priority": rng.randint(1, 10),
            "keys": f"k{i} order-{i % 97}",
            "app": rng.choice(["shop", "billing", "ledger"]),
        }
        if rng.random() < 0.2:
            header["delayTime"] = rng.choice([1000, 5000, 60000])
        if rng.random() < 0.2:
            header["expireTime"] = (ts // 1_000_000) + rng.randint(1000, 600000)
        if rng.random() < 0.1:
            header["traceId"] = f"otel-{rng.getrandbits(48):012x}"
        w = q.put(body, header=header, ts=ts, priority=header["priority"], trace=header.get("traceId", trace))
        if rng.random() < 0.02:
            # The producer timed out waiting for the answer and published again: a second copy.
            q.put(body, header=header, ts=ts + 1000, priority=header["priority"], trace=header.get("traceId", trace))
            q.truth.messages[-1].retry_of = (q.partition, w.segment, w.position)
    elif kind < 0.75 and q.w.ext:
        q.put(body, tag=rng.choice(["tagA", "tagB"]), ts=ts)
    else:
        trace_id = rng.getrandbits(63) if rng.random() < 0.5 else 0
        q.put(body, trace_id=trace_id, ts=ts, trace=str(trace_id) if trace_id else None)


def generate(
    data_path: str,
    messages: int = 10_000,
    *,
    seed: int = 7,
    max_bytes_per_file: int = 4 << 20,
    bad_inputs: bool = True,
) -> GroundTruth:
    """Write a sample nsqd data path with ``messages`` good messages (plus bad inputs).

    Topics ``orders`` (2 partitions), ``payments`` and the non-ext ``audit.log-v2`` carry the
    good messages, spread over several segments (rollover at ``max_bytes_per_file``). With
    ``bad_inputs`` it adds every kind of corruption the decoder must survive.
    """
    rng = random.Random(seed)
    truth = GroundTruth()
    queues = [
        _Queue(data_path, t, p, ext, truth, max_bytes_per_file) for t, parts, ext in TOPICS for p in range(parts)
    ]
    # Records written before "orders" became an ext topic: no flag, in an ext topic.
    legacy = min(50, messages // 10)
    for i in range(legacy):
        queues[0].put(b"legacy-%d" % i, ext=False, ts=BASE_NS + i * 1_000_000)
    for i in range(legacy, messages):
        _message(rng, i, queues[i % len(queues)], BASE_NS + i * 1_000_000)
    if bad_inputs:
        _bad_inputs(data_path, queues, truth)
    for q in queues:
        q.w.close()
    if bad_inputs:
        _after_close(data_path, queues, truth)
    return truth


def _ext(body: bytes, version: int, data: bytes, ts: int = BASE_NS) -> bytes:
    return encode_message(body, timestamp_ns=ts, message_id=999_999, ext_version=version, ext_data=data)


def _bad_inputs(data_path: str, queues: list[_Queue], truth: GroundTruth) -> None:
    orders = queues[0]
    # Framing intact, contents bad: each record quarantined on its own.
    orders.bad(_ext(b"body", 7, b"{}"), "unknown ext version 7")
    msg = _ext(b"", 4, b'{"a":"b"}')
    orders.bad(msg[:27] + struct.pack(">H", 500) + msg[29:], "runs past the record end")
    orders.bad(_ext(b"body", 4, b"tes0"), "not valid JSON")
    orders.bad(_ext(b"body", 4, b'["not","an","object"]'), "not an object")
    orders.bad(_ext(b"body", 4, b'{"##trace_id":12345}'), "##trace_id must be a decimal")
    orders.bad(b"0123456789", "below the 26-byte minimum")
    # Records that decode but break the default (warn-level) quality rules: kept, and counted.
    born = BASE_NS // 1_000_000
    for rule, header in (
        ("priority_range", {"priority": 15}),
        ("expire_before_born", {"bornTimestamp": born, "expireTime": born - 1000}),
        ("store_before_born", {"bornTimestamp": born + 3_600_000}),  # the producer's clock an hour ahead
        ("delay_above_max", {"bornTimestamp": born, "delayTime": 2 * 3_600_000}),  # orders* allow 1 h
    ):
        orders.put(b"breaks " + rule.encode(), header=header, ts=BASE_NS, priority=header.get("priority", 5))
        truth.warn(rule)
    # Framing lost: the rest of the segment is quarantined, then the queue continues in a new file.
    corrupt = _Queue(data_path, "corrupt", 0, True, truth, 1 << 30)
    queues.append(corrupt)
    for n, (prefix, why) in enumerate(((0, "invalid length prefix 0"), (-5, "invalid length prefix -5"),
                                       (1 << 29, f"invalid length prefix {1 << 29}"))):
        corrupt.put(b"before-%d" % n, header={"app": "ok"}, ts=BASE_NS + n)
        junk = struct.pack(">i", prefix) + b"\x01" * 40
        corrupt.bad(b"", why, framed=junk)
        corrupt.w.roll()
    corrupt.put(b"after", ts=BASE_NS + 9)
    # A topic folder whose name nsqd would never accept: its records are quarantined.
    bad_topic = _Queue(data_path, "bad topic!", 0, True, truth, 1 << 30)
    for n in range(3):
        w = bad_topic.w.put(b"in a bad folder %d" % n, timestamp_ns=BASE_NS)
        truth.quarantined.append(ExpectedQuarantine(w.segment, w.position, w.framed_size, "not a valid NSQ topic name"))
    bad_topic.w.close()
    # A queue with an empty segment.
    empty = NsqQueueWriter(data_path, "empty", 0)
    empty.close()


def _after_close(data_path: str, queues: list[_Queue], truth: GroundTruth) -> None:
    # A half-written record after the committed end: pending, not quarantined.
    payments = queues[2].w
    seg = os.path.join(payments.dir, payments.segment)
    partial = struct.pack(">i", 100) + b"\x00" * 30
    with open(seg, "ab") as f:
        f.write(partial)
    truth.pending_bytes += len(partial)
    # A queue whose meta files are missing, its live segment ending in a partial record.
    q = _Queue(data_path, "nometa", 0, True, truth, 600)
    nometa = q.w
    for n in range(20):
        q.put(b"no meta %d " % n + b"." * 40, ts=BASE_NS + n)
    nometa.close()
    for name in os.listdir(nometa.dir):
        if ".meta." in name or name.endswith(".offsetmeta.dat"):
            os.remove(os.path.join(nometa.dir, name))
    with open(os.path.join(nometa.dir, nometa.segment), "ab") as f:
        f.write(partial)
    truth.pending_bytes += len(partial)
    # A segment file whose name does not parse: quarantined whole.
    odd = os.path.join(data_path, "orders", "orders-0.diskqueue.12ab.dat")
    with open(odd, "wb") as f:
        f.write(b"\x00\x00\x00\x05hello")
    truth.quarantined.append(ExpectedQuarantine("orders-0.diskqueue.12ab.dat", 0, 9, "does not parse"))
    # Files nsqd keeps beside the segments that are not topic segments: never read.
    with open(os.path.join(data_path, "orders", "orders-0-[delayed.queue].diskqueue.000000.dat"), "wb") as f:
        f.write(b"\x00\x00\x00\x03abc")
    with open(os.path.join(data_path, "orders", "orders-0.diskqueue.000099.dat.rolldata"), "wb") as f:
        f.write(b"rolled back")


def write_live(
    data_path: str,
    messages: int,
    *,
    seed: int = 11,
    max_bytes_per_file: int = 32 << 10,
    flush_every: int = 25,
    torn_every: int = 7,
    pause: float = 0.005,
) -> GroundTruth:
    """Append like a live nsqd, for a reader running at the same time; returns what was written.

    Writes go out in small flushes, some records torn across two flushes (a partial record sits
    past the committed end for a while), the writer meta is persisted every ``flush_every``
    messages, segments roll at ``max_bytes_per_file``, and halfway a new partition and a new
    topic appear. ``storeTimestamp`` is the real append time, so freshness can be measured.
    """
    rng = random.Random(seed)
    truth = GroundTruth()
    queues = [_Queue(data_path, "live", p, True, truth, max_bytes_per_file) for p in range(2)]
    for i in range(messages):
        if i == messages // 2:
            queues.append(_Queue(data_path, "live", 2, True, truth, max_bytes_per_file))
            queues.append(_Queue(data_path, "late.topic", 0, True, truth, max_bytes_per_file))
        q = queues[rng.randrange(len(queues))]
        trace = str(rng.getrandbits(63))
        body = b"live-%d-" % i + rng.randbytes(rng.randint(20, 400))
        header = {"##trace_id": trace, "priority": rng.randint(1, 10)}
        framed = q.w.frame(body, header=header, timestamp_ns=time.time_ns())
        w = q.w.put_torn(framed, len(framed) // 2, pause) if i % torn_every == 0 else q.w.put_raw(framed)
        truth.messages.append(
            Expected(q.topic, q.partition, w.segment, w.position, w.virtual_offset, str(q.w.next_id - 1), body,
                     trace, None, header["priority"])
        )
        if i % flush_every == flush_every - 1:
            for other in queues:
                other.w.flush()
            time.sleep(pause)
    for q in queues:
        q.w.close()
    return truth
