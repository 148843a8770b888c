"""Sample RocketMQ stores with known contents: for the demo, the tests and the benchmarks.

:func:`generate` writes a broker store through :class:`CommitLogWriter` the way a broker's
traffic would lay it out: plain, tagged and keyed messages, FIFO (sharding key), DELAY-level
messages (the SCHEDULE_TOPIC_XXXX copy, then the delivery in the real topic), timer
messages, transactions (half, commit, op), consumer retries and dead letters, producer
retries, compressed bodies, IPv6 hosts, inner batches and the 5.2 CRC trailer; then, with
``bad_inputs``, every kind of corruption the decoder must survive. It returns the ground
truth. Deterministic for a seed (times come from a fixed base, not the clock).
"""
from __future__ import annotations

import os
import random
import struct
from dataclasses import replace

from msglake.formats import rocketmq_layout as L
from msglake.samples.rocketmq_writer import CommitLogWriter, Inner, Message, Written, write_consumer_offsets
from msglake.samples.truth import Expected, ExpectedQuarantine, GroundTruth

BASE_MS = 1_793_500_000_000  # 2026-11-01T02:26:40Z
TOPICS = (("orders", 4), ("payments", 2))
GROUP = "billing"
#: Producer machines: (born host, UNIQ_KEY ip bytes, pid, UTC offset of the producer's clock in minutes).
PRODUCERS = (
    ("10.1.0.7:52011", bytes([10, 1, 0, 7]), 4242, 480),
    ("10.1.0.9:40770", bytes([10, 1, 0, 9]), 77, 0),
    ("[fd00::17]:33333", bytes.fromhex("fd000000000000000000000000000017"), 1301, -300),
)
STORE_HOST = "192.168.0.10:10911"


def month_start_ms(born_ms: int, utc_offset_min: int) -> int:
    """Epoch ms of 00:00 on day 1 of the month of ``born_ms``, in a zone ``utc_offset_min`` from UTC."""
    import datetime as dt

    tz = dt.timezone(dt.timedelta(minutes=utc_offset_min))
    local = dt.datetime.fromtimestamp(born_ms / 1000, tz)
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


class _Gen:
    def __init__(self, store: str, rng: random.Random, file_size: int, truth: GroundTruth):
        self.w = CommitLogWriter(store, file_size)
        self.rng, self.truth = rng, truth
        self.counter = 0
        self.first: dict[tuple[str, str], Written] = {}

    def uniq(self, born_ms: int, producer) -> str:
        _, ip, pid, offset = producer
        self.counter += 1
        return L.make_uniq_key(ip, pid, 0x5EED1234, born_ms - month_start_ms(born_ms, offset), self.counter)

    def put(self, m: Message, *, expect: bool = True) -> Written:
        w = self.w.put(m)
        if expect:
            if m.inner is not None:
                pos = w.body_position
                for k, inner in enumerate(m.inner):
                    own = inner.properties.get("UNIQ_KEY")
                    self.truth.messages.append(Expected(
                        m.topic, m.queue_id, w.segment, pos, w.queue_offset + k, w.message_id, inner.body,
                        None, inner.properties.get("TAGS"), 5, unique_id=own, producer_unique_id=own))
                    pos += 22 + len(inner.body) + len(L.properties_to_string(inner.properties).encode())
            else:
                own = m.properties.get("UNIQ_KEY")
                # A batch member's record ends with the batch's properties: its UNIQ_KEY is the last.
                last = (m.batch_properties or {}).get("UNIQ_KEY", own)
                self.truth.messages.append(Expected(
                    m.topic, m.queue_id, w.segment, w.position, w.queue_offset, w.message_id,
                    m.body if m.compression is None else w.body, m.properties.get("TRACE_CONTEXT"),
                    m.properties.get("TAGS"), 5, unique_id=last, producer_unique_id=own))
        return w

    def bad(self, data: bytes, reason: str) -> Written:
        w = self.w.put_raw(data)
        self.truth.quarantined.append(ExpectedQuarantine(w.segment, w.position, len(data), reason))
        return w


def _body(rng: random.Random, i: int) -> bytes:
    if rng.random() < 0.3:
        return rng.randbytes(rng.randint(100, 1000))
    return b'{"order":%d,"amount":%d,"note":"%s"}' % (i, rng.randint(1, 10**6), b"x" * rng.randint(50, 600))


def _message(g: _Gen, i: int, born: int) -> None:
    rng = g.rng
    topic, queues = TOPICS[i % len(TOPICS)]
    producer = PRODUCERS[i % len(PRODUCERS)] if rng.random() < 0.1 else PRODUCERS[i % 2]
    uniq = g.uniq(born, producer)
    props = {"UNIQ_KEY": uniq, "WAIT": "true", "CLUSTER": "DefaultCluster"}
    if rng.random() < 0.8:
        props["TAGS"] = rng.choice(["created", "paid", "shipped"])
    if rng.random() < 0.6:
        props["KEYS"] = f"order-{i} customer-{i % 97}"
    if rng.random() < 0.5:
        props["TRACE_CONTEXT"] = f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"
    if rng.random() < 0.3:
        props["app"] = rng.choice(["shop", "billing", "ledger"])
    base = Message(topic, _body(rng, i), props, queue_id=(i // len(TOPICS)) % queues, born_timestamp=born,
                   store_timestamp=born + rng.randint(1, 40), born_host=producer[0], store_host=STORE_HOST)
    kind = rng.random()
    if kind < 0.05:  # DELAY level: parked in SCHEDULE_TOPIC_XXXX, then delivered to the real topic
        level = rng.choice([1, 3, 5, 20])  # 20 is above the table: clamped to 2h
        props.update({"DELAY": str(level), "REAL_TOPIC": topic, "REAL_QID": str(base.queue_id)})
        g.put(replace(base, topic="SCHEDULE_TOPIC_XXXX", queue_id=min(level, 18) - 1))
        g.put(replace(base, store_timestamp=base.store_timestamp + 5000))
    elif kind < 0.08:  # timer message
        props.update({"TIMER_DELIVER_MS": str(born + 120_000)})
        park = dict(props, TIMER_OUT_MS=str(born + 120_000), REAL_TOPIC=topic, REAL_QID=str(base.queue_id))
        g.put(replace(base, topic="rmq_sys_wheel_timer", properties=park))
        g.put(replace(base, properties=dict(props, TIMER_ENQUEUE_MS=str(born + 10), TIMER_DEQUEUE_MS=str(born + 120_000)),
                      store_timestamp=born + 120_005))
    elif kind < 0.10:  # transaction: half, commit in the real topic, op record
        props.update({"TRAN_MSG": "true", "PGROUP": "tx-producers"})
        half = g.put(replace(base, topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0,
                             properties=dict(props, REAL_TOPIC=topic, REAL_QID=str(base.queue_id))))
        g.put(replace(base, transaction=L.TRANSACTION_COMMIT, prepared_offset=half.physical_offset,
                      store_timestamp=base.store_timestamp + 300))
        g.put(replace(base, topic="RMQ_SYS_TRANS_OP_HALF_TOPIC", queue_id=0, body=str(half.queue_offset).encode(),
                      properties={"TAGS": "d", "UNIQ_KEY": g.uniq(born, producer)}))
    elif kind < 0.13:  # consumed, failed, retried; a few go all the way to the DLQ
        first = g.put(base)
        retry = dict(props, RETRY_TOPIC=topic, ORIGIN_MESSAGE_ID=first.message_id)
        g.put(replace(base, topic=f"%RETRY%{GROUP}", queue_id=0, properties=retry, reconsume_times=1,
                      store_timestamp=born + 10_000))
        if rng.random() < 0.3:
            g.put(replace(base, topic=f"%DLQ%{GROUP}", queue_id=0, properties=retry, reconsume_times=16,
                          store_timestamp=born + 20_000))
    elif kind < 0.16:  # FIFO (gRPC client: message group)
        props["__SHARDINGKEY"] = f"customer-{i % 13}"
        g.put(base)
    elif kind < 0.17:  # large body, compressed by the producer
        codec = rng.choice(["zlib", "lz4", "zstd"])
        g.put(replace(base, body=b'{"report":"%s"}' % (b"ab" * 3000), compression=codec))
    elif kind < 0.175:  # inner batch (batch ConsumeQueue topic)
        inner = [Inner(b"batched-%d-%d" % (i, k), {"UNIQ_KEY": g.uniq(born, producer), "TAGS": "batch"}, flag=k)
                 for k in range(rng.randint(2, 5))]
        g.put(replace(base, topic="orders-batch", queue_id=0, body=b"", properties={"UNIQ_KEY": uniq}, inner=inner))
    elif kind < 0.18:  # request/reply with a TTL, and the 5.2 CRC trailer
        props.update({"TTL": "3000", "CORRELATION_ID": f"corr-{i}", "MSG_TYPE": "request"})
        g.put(replace(base, crc32_trailer=True))
    else:
        w = g.put(base)
        if rng.random() < 0.02:  # producer timed out and sent again: same UNIQ_KEY, second record
            g.put(replace(base, store_timestamp=base.store_timestamp + 1000))
            g.truth.messages[-1].retry_of = (base.queue_id, w.segment, w.position)


def generate(store: str, messages: int = 10_000, *, seed: int = 7, file_size: int = 1 << 20,
             bad_inputs: bool = True) -> GroundTruth:
    """Write a sample RocketMQ store (``commitlog/``, ``consumequeue/``, ``config/``) with ``messages`` messages.

    Messages are spread over topics ``orders`` (4 queues) and ``payments`` (2), with the
    system-topic copies, retries and batches their kinds produce; files roll at ``file_size``.
    """
    rng = random.Random(seed)
    truth = GroundTruth()
    g = _Gen(store, rng, file_size, truth)
    for i in range(messages):
        _message(g, i, BASE_MS + i * 7)
        if bad_inputs and i == messages // 2:
            _bad_inputs(g)
    _batch_send(g, BASE_MS + messages * 7)
    g.w.write_consume_queues()
    consumed = {(t, GROUP): {q: g.w.queue_offsets.get((t, q), 0) // 2 for q in range(n)} for t, n in TOPICS}
    consumed[(f"%RETRY%{GROUP}", GROUP)] = {0: g.w.queue_offsets.get((f"%RETRY%{GROUP}", 0), 0)}
    write_consumer_offsets(store, consumed)
    g.w.close()
    truth.padding_bytes = g.w.padding
    if bad_inputs:
        _odd_files(store, g, truth)
    return truth


def _batch_send(g: _Gen, born: int, size: int = 4) -> None:
    """One ``producer.send(List<Message>)``: the broker stores each message as its own record and
    appends the batch's properties (its own UNIQ_KEY among them) after the message's, as a real
    5.3.3 broker does (tests/data/rocketmq-batch). Distinct messages, none a retry of another."""
    producer = PRODUCERS[0]
    batch = {"UNIQ_KEY": g.uniq(born, producer), "WAIT": "true"}
    for k in range(size):
        props = {"KEYS": f"batch-{k}", "UNIQ_KEY": g.uniq(born, producer), "seq": str(k)}
        g.put(Message("orders", b"batch member %d" % k, props, queue_id=0, born_timestamp=born,
                      store_timestamp=born + 3, born_host=producer[0], store_host=STORE_HOST, batch_properties=batch))


def _bad_inputs(g: _Gen) -> None:
    """Corrupt records among good ones; each is quarantined alone and the reader goes on."""
    m = Message("orders", b"victim body", {"UNIQ_KEY": "BAD", "TAGS": "x"}, queue_id=1, store_host=STORE_HOST)

    def rec() -> bytearray:
        return bytearray(g.w.record_bytes(m))

    def bad(data: bytes, reason: str) -> None:
        if g.w.pos + len(data) + 8 + 400 > g.w.file_size:
            g.w._roll()  # keep each corrupt record in a file with a good record after it
        g.bad(bytes(data), reason)
        g.put(replace(m, body=b"after the bad record", properties={"UNIQ_KEY": f"AFTER-{len(g.truth.quarantined)}"}))

    r = rec(); r[4:8] = b"\x00\x11\x22\x33"; bad(r, "bad magic code 0x00112233")
    r = rec(); r[0:4] = struct.pack(">i", 1 << 30); bad(r, "runs past the end of the data")
    r = rec(); r[0:4] = struct.pack(">i", 40); bad(r, "smaller than the 91-byte fixed part")
    r = rec(); r[28:36] = struct.pack(">q", 12345); bad(r, "PHYSICALOFFSET 12345 does not match")
    r = rec(); r[84:88] = struct.pack(">i", len(m.body) + 1000); bad(r, "BODYLENGTH")
    r = rec(); r[88] ^= 0xFF; bad(r, "BODYCRC mismatch")
    body_end = 88 + len(m.body)
    r = rec(); r[body_end + 1 : body_end + 3] = b"\xff\xfe"; bad(r, "TOPIC is not valid UTF-8")
    odd = replace(m, properties={"KEY": "caf\u00e9"})
    r = bytearray(g.w.record_bytes(odd)); r[-3:-1] = b"\xc3\x28"; bad(r, "PROPERTIES are not valid UTF-8")
    # Decodes, but no broker accepts this topic name: the topic_name rule (quarantine by default)
    # moves it to quarantine with its bytes.
    if g.w.pos + 1000 > g.w.file_size:
        g.w._roll()
    w = g.put(replace(m, topic="orders prod", properties={"UNIQ_KEY": g.uniq(BASE_MS, PRODUCERS[0])}), expect=False)
    g.truth.held.append(ExpectedQuarantine(w.segment, w.position, w.length, "topic_name"))
    # A property piece without its 0x01 separator: the broker's parser drops the piece and keeps
    # the record, and so does the decoder: a message with no properties.
    g.put(replace(m, properties={}, raw_properties="no separators at all"))


def _odd_files(store: str, g: _Gen, truth: GroundTruth) -> None:
    folder = os.path.join(store, "commitlog")
    # A CommitLog file under a name that is not 20 digits: its offset is unknown, kept whole in quarantine.
    data = g.w.record_bytes(Message("orders", b"stray", {"UNIQ_KEY": "STRAY"}, store_host=STORE_HOST))
    with open(os.path.join(folder, "0000000000000000000"), "wb") as f:
        f.write(data)
    truth.quarantined.append(ExpectedQuarantine("0000000000000000000", 0, len(data), "not a 20-digit"))
    # A sealed file shorter than its peers (a bad copy): its last record is cut in half.
    files = sorted(n for n in os.listdir(folder) if L.FILE_NAME_RE.match(n))
    if len(files) < 3:
        return
    victim = files[-2]
    path = os.path.join(folder, victim)
    last, length = g.w.last_record[victim]
    truth.padding_bytes -= g.w.file_size - (last + length)  # its blank goes with the cut
    os.truncate(path, last + length // 2)
    truth.messages = [m for m in truth.messages if not (m.segment == victim and m.position >= last)]
    truth.quarantined = [q for q in truth.quarantined if not (q.segment == victim and q.position >= last)]
    truth.quarantined.append(ExpectedQuarantine(victim, last, length // 2, "runs past the end of the data"))
