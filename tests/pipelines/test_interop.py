"""The lake's Delta tables are readable outside Spark by an independent reader (delta-rs)."""
from __future__ import annotations

import pytest

from msglake.pipelines.jobs.ingest import ingest
from tests.conftest import two_broker_settings

pytestmark = pytest.mark.slow


def test_delta_rs_reads_every_table_with_the_same_rows(spark, tmp_path):
    from deltalake import DeltaTable

    settings = two_broker_settings(tmp_path, 300, 300)
    for name in ("nsq", "rmq"):
        assert ingest(spark, settings, name).balanced
    for table in ("messages", "quarantine", "consumer_offsets"):
        path = settings.lake.table_path(table)
        arrow = DeltaTable(path).to_pyarrow_table()
        assert arrow.num_rows == spark.read.format("delta").load(path).count() > 0, table
    dt = DeltaTable(settings.lake.table_path("messages"))
    assert dt.metadata().partition_columns == ["topic", "partition"]
    orders = dt.to_pyarrow_table(filters=[("topic", "=", "orders")])
    assert orders.num_rows == spark.sql(f"SELECT * FROM delta.`{settings.lake.table_path('messages')}` "
                                        "WHERE topic = 'orders'").count()
    assert set(orders.column("sourceFormat").to_pylist()) == {"nsq_ext", "rocketmq_commitlog"}
