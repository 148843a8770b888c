"""The driver JVM's class archive (AppCDS): Spark's, Delta's and msglake's classes as the JVM leaves them
once loaded and verified, mapped by each later local-mode start instead of read from the jars again.

``make setup`` runs ``python -m msglake.pipelines.class_archive`` once: a small local job (the demo's
sample data of one broker ingested, a SQL query) in a JVM started with ``-XX:ArchiveClassesAtExit``,
which writes the archive when it exits. :func:`msglake.pipelines.session.build_session` then starts
local drivers with ``-XX:SharedArchiveFile`` when the archive is there. Measured here: ``msglake sql
"SELECT 1"`` 12.3-13.3 s without it, 8.4-8.6 s with it (2026-11-28, a slower hour: 16.7 s, 10.4 s).

One broker is enough: the other's ingest loads the same JVM classes (its decoding is Python's);
ingesting both made the job 20 s longer for an archive 0.7 % larger and no faster start. The job
decodes on the Python path (``MSGLAKE_NATIVE=0``, the same JVM classes), so the set-up runs it while
it builds the native core instead of after.

The JVM checks the archive against its own build and class path and ignores one that does not
match (silently: its warning would reach the terminal); remove the file to stop using it.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ARCHIVE = "msglake-classes.jsa"
# The JVM's own notes about the archive (e.g. a class path that no longer matches) are turned off:
# a mismatch is no error (the JVM starts without the archive), and they went to the user's
# terminal when the driver's stdout was msglake's (now the log file's).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path(settings) -> Path:
    from msglake.pipelines.session import jars_dir

    return jars_dir(settings) / ARCHIVE


def main() -> int:
    from msglake.formats.native import ENV as NATIVE_ENV
    from msglake.pipelines import settings as settings_mod
    from msglake.pipelines.jobs.demo import prepare_data
    from msglake.pipelines.jobs.ingest import ingest
    from msglake.pipelines.session import LOCAL_DRIVER_GC, LOG4J, build_session

    # Set before the session starts: its Python workers inherit the driver's environment.
    os.environ[NATIVE_ENV] = "0"
    with tempfile.TemporaryDirectory(prefix="msglake-classes-") as tmp:
        # The embedded default's first source and the demo's sample data, in a folder of its own.
        doc = settings_mod.from_dict(settings_mod.default_document()).model_dump()
        doc["lake"]["root"] = os.path.join(tmp, "lake")
        doc["sources"] = [{**doc["sources"][0], "path": os.path.join(tmp, doc["sources"][0]["name"])}]
        settings = settings_mod.from_dict(doc, "class archive")
        target = archive_path(settings)
        partial = target.with_name(target.name + ".tmp")
        partial.unlink(missing_ok=True)
        settings.spark.conf["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j.configurationFile=file:{LOG4J} {LOCAL_DRIVER_GC} -XX:ArchiveClassesAtExit={partial} {QUIET}")
        prepare_data(settings, 200, False, lambda _line: None)
        spark = build_session(settings, app_name="msglake-class-archive")
        ingest(spark, settings, settings.sources[0].name)
        spark.sql("SELECT topic, count(*) FROM messages GROUP BY topic").collect()
        jvm = spark.sparkContext._gateway.proc  # the driver JVM pyspark started
        spark.stop()
        jvm.stdin.close()  # the driver JVM exits on end of input, writing the archive as it goes
        jvm.wait(timeout=300)
    if jvm.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        print(f"msglake: class archive not written (driver exit code {jvm.returncode}); local starts stay "
              "a few seconds slower", file=sys.stderr)
        return 1
    os.replace(partial, target)  # whole or not at all
    print(f"msglake: class archive {target} ({target.stat().st_size >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
