"""The Spark side of msglake's I/O: the segment data source, the Delta sinks, the lake's tables
and views, checkpoints, consumer offsets, progress reporting and the cluster code zip."""
