"""Producer-side message ids (RocketMQ UNIQ_KEY) taken apart with Spark built-ins.

A v0 id (remoting clients, ``MessageClientIDSetter``; 32 hex characters, 56 with an IPv6
address) holds the producer's IP, pid, a class-loader hash, the milliseconds since the start
of the month *in the producer's time zone*, and a counter. A v1 id (5.x gRPC clients; 34
characters starting ``01``) holds a MAC address, the pid, seconds since 2021-01-01 in the
producer's zone, and a sequence number (spec rocketmq-commitlog.md §4).

Neither says which month or which zone. ``bornTimestamp`` of the same message (taken a few
milliseconds after the id) settles both: the producer's UTC offset is the whole quarter hour
that makes the id's clock agree with it, and the id's time follows.
"""
from __future__ import annotations

from pyspark.sql import Column, functions as F

_DAY_MS = 86_400_000
_QUARTER_HOUR_MS = 900_000
_V1_EPOCH_MS = 1_609_459_200_000  # 2021-01-01T00:00:00Z


def _hex(u: Column, start: int | Column, length: int) -> Column:
    """The unsigned integer in ``length`` hex characters of ``u`` from 1-based ``start``."""
    start = start if isinstance(start, Column) else F.lit(start)
    return F.conv(u.substr(start, F.lit(length)), 16, 10).cast("bigint")


def _zone_minutes(local_clock_ms: Column, born_ms: Column) -> Column:
    """UTC offset (minutes) that turns a local-clock reading into ``born``, in whole quarter hours."""
    return (F.round((local_clock_ms - born_ms) / _QUARTER_HOUR_MS) * 15).cast("int")


def unique_id_parts(unique_id: Column | str, born: Column | str) -> Column:
    """``struct<version, ip, mac, pid, idTime, producerUtcOffsetMinutes, counter>`` of a UNIQ_KEY.

    Parameters
    ----------
    unique_id : Column or str
        The ``uniqueId`` column (UNIQ_KEY).
    born : Column or str
        ``bornTimestamp`` of the same row: anchors the month and the producer's time zone.

    Returns
    -------
    Column
        Null for ids of other shapes (broker-made ids of other clients, garbage). ``ip`` is
        set for v0 ids, ``mac`` for v1; ``idTime`` is when the producer made the id.
    """
    u = F.upper(F.col(unique_id) if isinstance(unique_id, str) else unique_id)
    born_ms = F.unix_millis(F.col(born) if isinstance(born, str) else born)
    n = F.length(u)
    is_hex = u.rlike("^[0-9A-F]+$")
    v0 = is_hex & ((n == 32) | (n == 56))
    v1 = is_hex & (n == 34) & u.startswith("01")
    ip_hex = F.when(n == 56, F.lit(32)).otherwise(F.lit(8))

    ipv4 = F.concat_ws(".", *[_hex(u, 1 + 2 * i, 2).cast("string") for i in range(4)])
    ipv6 = F.lower(F.concat_ws(":", *[F.conv(u.substr(1 + 4 * i, 4), 16, 16) for i in range(8)]))
    in_month_ms = _hex(u, ip_hex + 13, 8)
    # The producer's month start is a local midnight on day 1: find the one (there is at most
    # one) within -12 h .. +14 h of the UTC instant the id implies, with date functions that
    # do not depend on the session time zone.
    approx_start = born_ms - in_month_ms
    local_start = F.unix_date(
        F.trunc(F.date_from_unix_date(F.floor((approx_start + 14 * 3_600_000) / _DAY_MS).cast("int")), "MM")
    ).cast("bigint") * _DAY_MS
    v0_zone = _zone_minutes(local_start, approx_start)
    v0_time = F.timestamp_millis(local_start - v0_zone.cast("bigint") * 60_000 + in_month_ms)
    v0_zone_ok = (local_start - approx_start >= -12 * 3_600_000) & (local_start - approx_start <= 14 * 3_600_000)

    v1_local = F.lit(_V1_EPOCH_MS) + _hex(u, 19, 8) * 1000
    v1_zone = _zone_minutes(v1_local, born_ms)
    mac = F.lower(F.concat_ws(":", *[u.substr(3 + 2 * i, 2) for i in range(6)]))

    return (
        F.when(
            v0,
            F.struct(
                F.lit("v0").alias("version"),
                F.when(n == 32, ipv4).otherwise(ipv6).alias("ip"),
                F.lit(None).cast("string").alias("mac"),
                _hex(u, ip_hex + 1, 4).cast("int").alias("pid"),
                F.when(v0_zone_ok, v0_time).alias("idTime"),
                F.when(v0_zone_ok, v0_zone).alias("producerUtcOffsetMinutes"),
                _hex(u, ip_hex + 21, 4).alias("counter"),
            ),
        )
        .when(
            v1,
            F.struct(
                F.lit("v1").alias("version"),
                F.lit(None).cast("string").alias("ip"),
                mac.alias("mac"),
                _hex(u, 15, 4).cast("int").alias("pid"),
                F.timestamp_millis(v1_local - v1_zone.cast("bigint") * 60_000).alias("idTime"),
                v1_zone.alias("producerUtcOffsetMinutes"),
                _hex(u, 27, 8).alias("counter"),
            ),
        )
    )
