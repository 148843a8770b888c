"""The driver JVM's class archive (AppCDS): Spark's, Delta's and msglake's classes as the JVM leaves them
once loaded and verified, mapped by each later local-mode start instead of read from the jars again.

``make setup`` runs ``python -m msglake.pipelines.class_archive`` once: a small local job (two sample
sources ingested, a SQL query) in a JVM started with ``-XX:ArchiveClassesAtExit``, which writes the
archive when it exits. :func:`msglake.pipelines.session.build_session` then starts local drivers with
``-XX:SharedArchiveFile`` when the archive is there. Measured here: ``msglake sql "SELECT 1"`` 12.3-13.3 s
without it, 8.4-8.6 s with it. The JVM checks the archive against its own build and class path and
ignores one that does not match (silently: its warning would reach the terminal); remove the file to
stop using it.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ARCHIVE = "msglake-classes.jsa"
# The JVM's own notes about the archive (e.g. a class path that no longer matches) go to stdout,
# which is the user's terminal for a local driver.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path(settings) -> Path:
    from msglake.pipelines.session import jars_dir

    return jars_dir(settings) / ARCHIVE


def main() -> int:
    from msglake.pipelines import settings as settings_mod
    from msglake.pipelines.jobs.ingest import ingest
    from msglake.pipelines.session import LOG4J, build_session
    from msglake.samples.nsq import generate as generate_nsq
    from msglake.samples.rocketmq import generate as generate_rocketmq

    with tempfile.TemporaryDirectory(prefix="msglake-classes-") as tmp:
        doc = settings_mod.from_dict(settings_mod.default_document()).model_dump()
        doc["lake"]["root"] = os.path.join(tmp, "lake")
        doc["sources"] = [
            {"name": "nsq", "format": "nsq-ext", "path": os.path.join(tmp, "nsq"), "storeHost": "127.0.0.1:4150"},
            {"name": "rmq", "format": "rocketmq-commitlog", "path": os.path.join(tmp, "store")},
        ]
        settings = settings_mod.from_dict(doc, "class archive")
        target = archive_path(settings)
        partial = target.with_name(target.name + ".tmp")
        partial.unlink(missing_ok=True)
        settings.spark.conf["spark.driver.extraJavaOptions"] = (
            f"-Dlog4j.configurationFile=file:{LOG4J} -XX:ArchiveClassesAtExit={partial} {QUIET}")
        generate_nsq(os.path.join(tmp, "nsq"), 200, max_bytes_per_file=16 << 10)
        generate_rocketmq(os.path.join(tmp, "store"), 200, file_size=16 << 10)
        spark = build_session(settings, app_name="msglake-class-archive")
        for src in settings.sources:
            ingest(spark, settings, src.name)
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
