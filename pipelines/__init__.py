"""The I/O edge of msglake: settings, the Spark session factory, the data source, Delta sinks, jobs, CLI."""
