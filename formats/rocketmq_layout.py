"""Apache RocketMQ store layout: constants, names, properties, ids (docs/rocketmq-commitlog.md).

Plain-Python reference versions of the rules the vectorised decoder applies to whole
buffers; the writer and the tests use them record by record.
"""
from __future__ import annotations

import ipaddress
import re
import struct

#: Magic codes (spec §1.3), as signed int32 and as the 4 bytes on disk.
MAGIC_V1 = -626843481  # DA A3 20 A7
MAGIC_V2 = -626843477  # DA A3 20 AB
MAGIC_BLANK = -875286124  # CB D4 31 94
MAGIC_PREFIX = b"\xda\xa3\x20"  # shared by v1 and v2: a resync search looks for it
BLANK_BYTES = struct.pack(">i", MAGIC_BLANK)

# SYSFLAG bits (spec §1.4).
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700

#: ``(sysflag & 0x700) >> 8`` -> codec name; 0 is zlib (producers before the type bits).
COMPRESSION_TYPES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}
COMPRESSION_BITS = {"zlib": 3, "lz4": 1, "zstd": 2}
TRANSACTION_STATES = {0x4: "PREPARED", 0x8: "COMMIT", 0xC: "ROLLBACK"}

#: Bytes before the born host (TOTALSIZE .. BORNTIMESTAMP).
BORN_HOST_AT = 48
#: Smallest record: v1, IPv4 hosts, empty body, topic and properties (spec §1.2).
MIN_RECORD = 91
#: Blank end-of-file record: TOTALSIZE + MAGIC only (``END_FILE_MIN_BLANK_LENGTH``).
BLANK_LENGTH = 8
#: Default ``mappedFileSizeCommitLog``.
DEFAULT_FILE_SIZE = 1 << 30

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
CRC32_KEY = "__CRC32#"

FILE_NAME_RE = re.compile(r"^\d{20}$")

#: ``messageDelayLevel`` default (MessageStoreConfig).
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

#: Property names the broker reserves (``MessageConst.STRING_HASH_SET``, HEAD 5.3.x) plus the
#: system keys that are not in that set but are never user properties. Every other key is a
#: user property and goes to the ``properties`` column.
RESERVED_KEYS = frozenset(
    """TRACE_ON MSG_REGION KEYS TAGS WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP
    MIN_OFFSET MAX_OFFSET BUYER_ID ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG
    RECONSUME_TIME UNIQ_KEY MAX_RECONSUME_TIMES CONSUME_START_TIME POP_CK POP_CK_OFFSET 1ST_POP_TIME
    TRAN_PREPARED_QUEUE_OFFSET DUP_INFO EXTEND_UNIQ_INFO INSTANCE_ID CORRELATION_ID REPLY_TO_CLIENT TTL
    ARRIVE_TIME PUSH_REPLY_TIME CLUSTER MSG_TYPE INNER_MULTI_QUEUE_OFFSET TIMER_DELAY_SEC
    TIMER_DELIVER_MS TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS TIMER_ROLL_TIMES TIMER_OUT_MS TIMER_DEL_UNIQKEY
    TIMER_DELAY_LEVEL __BORNHOST BORN_TIMESTAMP
    INNER_NUM INNER_BASE __transactionId__ CHECK_IMMUNITY_TIME_IN_SECONDS TRANSACTION_CHECK_TIMES
    __SHARDINGKEY TRACE_CONTEXT TIMER_DELAY_MS DLQ_ORIGIN_TOPIC DLQ_ORIGIN_MESSAGE_ID""".split()
)

#: Topics where the broker parks internal copies or keeps bookkeeping (TopicValidator,
#: PopAckConstants); any ``rmq_sys_`` topic is one too.
SYSTEM_TOPICS = frozenset(
    """TBW102 SCHEDULE_TOPIC_XXXX BenchmarkTest RMQ_SYS_TRANS_HALF_TOPIC RMQ_SYS_TRACE_TOPIC
    RMQ_SYS_TRANS_OP_HALF_TOPIC TRANS_CHECK_MAX_TIME_TOPIC SELF_TEST_TOPIC OFFSET_MOVED_EVENT
    CHECKPOINT_TOPIC RMQ_SYS_ROCKSDB_OFFSET_TOPIC""".split()
)
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def is_system_topic(topic: str) -> bool:
    """True for the broker's internal topics.

    >>> is_system_topic("SCHEDULE_TOPIC_XXXX"), is_system_topic("rmq_sys_wheel_timer"), is_system_topic("orders")
    (True, True, False)
    """
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the start offset, 20 digits.

    >>> file_name(1073741824)
    '00000000001073741824'
    """
    return f"{offset:020d}"


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """``messageDelayLevel`` -> milliseconds per level (level 1 first).

    >>> parse_delay_levels("1s 5s 1m 2h")
    (1000, 5000, 60000, 7200000)
    >>> parse_delay_levels("1s 5x")
    Traceback (most recent call last):
    ValueError: delay level '5x' is not <number><s|m|h|d>
    """
    levels = []
    for word in spec.split():
        m = re.fullmatch(r"(\d+)([smhd])", word)
        if m is None:
            raise ValueError(f"delay level {word!r} is not <number><s|m|h|d>")
        levels.append(int(m[1]) * _UNIT_MS[m[2]])
    if not levels:
        raise ValueError("the delay level table is empty")
    return tuple(levels)


def delay_ms(level: int, levels: tuple[int, ...]) -> int | None:
    """Delay of a DELAY level; above the table clamps to the last, 0 or below is no delay.

    >>> levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    >>> delay_ms(3, levels), delay_ms(99, levels), delay_ms(0, levels)
    (10000, 7200000, None)
    """
    if level <= 0:
        return None
    return levels[min(level, len(levels)) - 1]


# ----------------------------------------------------------------------------- properties


def properties_to_string(props: dict[str, str | None]) -> str:
    """``MessageDecoder.messageProperties2String``: ``k 0x01 v 0x02`` per entry, null values skipped."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items() if v is not None)


def string_to_properties(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties``, rule for rule.

    Segments split on 0x02; a segment splits at its first 0x01; segments shorter than 3
    characters, or with an empty name or value, are dropped; a duplicate key keeps the last.

    >>> string_to_properties("a\\x011\\x02b\\x01\\x02\\x01c\\x02a\\x012")
    {'a': '2'}
    >>> string_to_properties("k\\x01v")
    {'k': 'v'}
    """
    out: dict[str, str] = {}
    for seg in text.split(PROPERTY_SEPARATOR):
        if len(seg) < 3:
            continue
        k, sep, v = seg.partition(NAME_VALUE_SEPARATOR)
        if sep and k and v:
            out[k] = v
    return out


def crc32_trailer(crc: int) -> str:
    """The 20-byte ``__CRC32#`` property (5.2+): 10 digits, least significant first.

    >>> crc32_trailer(123)
    '__CRC32#\\x013210000000\\x02'
    """
    return f"{CRC32_KEY}{NAME_VALUE_SEPARATOR}{str(crc).zfill(10)[::-1]}{PROPERTY_SEPARATOR}"


# ----------------------------------------------------------------------------- hosts and ids


def host_bytes(host: str) -> bytes:
    """``ip:port`` (``[v6]:port`` for IPv6) -> the 8 or 20 bytes of a host field."""
    addr, _, port = host.rpartition(":")
    ip = ipaddress.ip_address(addr.strip("[]"))
    return ip.packed + struct.pack(">i", int(port))


def format_host(raw: bytes) -> str:
    """The 8 or 20 bytes of a host field -> ``ip:port`` / ``[v6]:port``.

    >>> format_host(bytes([127, 0, 0, 1, 0, 0, 0x2a, 0x9f]))
    '127.0.0.1:10911'
    """
    port = struct.unpack(">i", raw[-4:])[0]
    ip = ipaddress.ip_address(raw[:-4])
    return f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}"


def offset_message_id(store_host: bytes, physical_offset: int) -> str:
    """``MessageDecoder.createMessageId``: store ip + port + physical offset, upper-case hex.

    >>> offset_message_id(host_bytes("100.81.0.250:10911"), 311825178782)
    '645100FA00002A9F000000489A3AA09E'
    """
    return (store_host + struct.pack(">q", physical_offset)).hex().upper()


def decode_offset_message_id(msg_id: str) -> tuple[str, int]:
    """``MessageDecoder.decodeMessageId``: (``ip:port``, physical offset); 32 chars is IPv4.

    >>> decode_offset_message_id("24084004018081003FAA1DDE2B3F898A00002A9F0000000000000CA0")
    ('[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911', 3232)
    """
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(msg_id) == 32 else 16
    return format_host(raw[: ip_len + 4]), struct.unpack(">q", raw[ip_len + 4 :])[0]


def make_uniq_key(ip: bytes, pid: int, class_loader: int, ms_since_month_start: int, counter: int) -> str:
    """A v0 UNIQ_KEY (``MessageClientIDSetter``): ip, pid, class-loader hash, time in month, counter.

    >>> make_uniq_key(bytes([10, 0, 0, 7]), 4242, 0x1234ABCD, 1_000, 7)
    '0A00000710921234ABCD000003E80007'
    """
    return (ip + struct.pack(">HiIH", pid & 0xFFFF, class_loader - (1 << 32) if class_loader >= 1 << 31 else class_loader,
                             ms_since_month_start & 0xFFFFFFFF, counter & 0xFFFF)).hex().upper()
