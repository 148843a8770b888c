import datetime as dt

from pyspark.sql import functions as F

from msglake.formats import rocketmq_layout as L
from msglake.samples.rocketmq import month_start_ms
from msglake.transforms.ids import unique_id_parts

UTC = dt.timezone.utc


def ms(d: dt.datetime) -> int:
    return int(d.timestamp() * 1000)


def test_unique_id_parts_recover_ip_pid_zone_and_time(spark):
    cases = []
    # (ip bytes, pid, producer UTC offset min, id time): one right after a local month start
    # that is still the previous month in UTC, one far into a 31-day month (past 2^31 ms).
    for ip, pid, offset, when in [
        (bytes([10, 1, 0, 7]), 4242, 480, dt.datetime(2026, 11, 30, 16, 30, tzinfo=UTC)),  # Dec 1st 00:30 at +08:00
        (bytes([192, 168, 9, 1]), 65535, -300, dt.datetime(2026, 12, 31, 22, 0, tzinfo=UTC)),  # day 31 at -05:00
        (bytes.fromhex("fd000000000000000000000000000017"), 7, 330, dt.datetime(2026, 6, 15, 8, tzinfo=UTC)),
    ]:
        t = ms(when)
        key = L.make_uniq_key(ip, pid, 0x12345678, t - month_start_ms(t, offset), 9)
        cases.append((key, when + dt.timedelta(milliseconds=4), ip, pid, offset, when))  # born 4 ms later
    # A 5.x gRPC id: "01", MAC, pid, seconds since 2021-01-01 local, sequence.
    local = dt.datetime(2026, 11, 22, 9, 0, 0, tzinfo=UTC)  # 09:00 on the producer's clock at +01:00
    secs = int((local - dt.datetime(2021, 1, 1, tzinfo=UTC)).total_seconds())
    v1 = "01" + "A1B2C3D4E5F6" + "0102" + f"{secs:08X}" + "0000002A"
    rows = [(k, ms(b)) for k, b, *_ in cases] + [(v1, ms(local) - 3_600_000), ("NOTANID", ms(local)), (None, ms(local))]
    df = spark.createDataFrame(rows, "uniqueId string, born_ms bigint").select(
        "uniqueId", F.timestamp_millis("born_ms").alias("bornTimestamp"))
    out = (df.select(unique_id_parts("uniqueId", "bornTimestamp").alias("p"))
           .select("p", F.unix_millis("p.idTime").alias("id_ms")).collect())  # epoch ms: no local-zone conversion
    for (key, born, ip, pid, offset, when), r in zip(cases, out):
        p = r.p
        assert (p.version, p.pid, p.producerUtcOffsetMinutes, p.counter) == ("v0", pid, offset, 9), key
        assert p.ip == (".".join(map(str, ip)) if len(ip) == 4 else "fd00:0:0:0:0:0:0:17")
        assert r.id_ms == ms(when)
    g = out[3].p
    assert (g.version, g.mac, g.pid, g.producerUtcOffsetMinutes, g.counter) == ("v1", "a1:b2:c3:d4:e5:f6", 258, 60, 42)
    assert out[3].id_ms == ms(local) - 3_600_000
    assert out[4].p is None and out[5].p is None


def test_unique_id_parts_is_a_column_expression(spark):
    df = spark.createDataFrame([("0A00000710921234ABCD000003E80007", dt.datetime(2026, 11, 1, tzinfo=UTC))],
                               "uniqueId string, bornTimestamp timestamp")
    plan = df.select(unique_id_parts(F.col("uniqueId"), F.col("bornTimestamp")))._jdf.queryExecution().toString()
    assert "PythonUDF" not in plan and "BatchEvalPython" not in plan
