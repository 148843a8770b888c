"""The one SparkSession factory: local by default, Delta configured, the msglake source registered."""
from __future__ import annotations

import glob
import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from msglake.conf import HERE as CONF_DIR, LOG4J
from msglake.errors import SetupError
from msglake.pipelines.settings import Settings

#: The checkout msglake runs from, when it does (an editable install): ``make setup`` puts the
#: jars in its ``.jars``. None for an installed wheel.
CHECKOUT = CONF_DIR.parent if (CONF_DIR.parent / "jars" / "pom.xml").is_file() else None


#: Columns of the lake's tables whose values are (nearly) all distinct: ids, bodies, positions,
#: times, CRCs. Parquet dictionary-encodes every column until its dictionary passes 1 MiB, which
#: for these means hashing every value of a small file (one per topic partition and batch) for
#: nothing. Measured on 953K NSQ messages written to Delta (local[2]): 1,000 topic partitions
#: 21.0-23.8 s -> 19.2-20.5 s, 10 partitions 6.4-7.1 s -> 5.5-7.0 s, files the same size. The
#: semantics tables' copy ids and times (``rowId`` ... ``time``): the 1M-message replay's
#: message_states (1.5M rows) written alone, median of four alternated, 8.26 -> 6.61 s, its
#: message_events (4.27M rows) 11.15 -> 9.24 s, the files 3 % and 2 % smaller.
UNIQUE_VALUED_COLUMNS = ("body", "rawBytes", "messageId", "uniqueId", "producerUniqueId", "traceId",
                         "segmentPosition", "queueOffset", "physicalOffset", "bornTimestamp", "storeTimestamp",
                         "bodyCrc", "rowId", "parentRowId", "deliverAt", "expireAt", "stateTime", "consumedAt", "time")


def jars_dir(settings: Settings) -> Path:
    """Where the Delta jars are: ``spark.jarsDir`` (or ``$MSGLAKE_JARS_DIR``), else ``./.jars``
    when it holds them, else the ``.jars`` of the checkout msglake runs from."""
    if settings.spark.jarsDir:
        return Path(settings.spark.jarsDir).resolve()
    here = Path(".jars").resolve()
    if CHECKOUT is None or any(here.glob("delta-spark_*.jar")):
        return here
    return CHECKOUT / ".jars"


def delta_jars(settings: Settings) -> list[str]:
    """The jar files to put on ``spark.jars``; fails with how to fetch them when they are missing."""
    folder = jars_dir(settings)
    jars = sorted(glob.glob(str(folder / "*.jar")))
    if not any(os.path.basename(j).startswith("delta-spark_") for j in jars):
        raise SetupError(
            f"the Delta Lake jars are not in {folder}. Fetch them once from Maven Central with "
            f"`make setup` (it runs `mvn -f jars/pom.xml dependency:copy-dependencies "
            f"-DoutputDirectory={folder}`), or point spark.jarsDir / MSGLAKE_JARS_DIR at a folder "
            f"that holds io.delta:delta-spark_4.2_2.13 and its dependencies."
        )
    return jars


#: The jar ``make setup`` compiles from ``jars/src`` into the jars folder, and what its classes
#: serve: the ``file:`` scheme of Hadoop's FileSystem API (Spark's file writes and reads) and of
#: its FileContext API (Delta's log, Structured Streaming's checkpoint).
LOCAL_FS_JAR = "msglake-hadoop-fs.jar"
LOCAL_FS = {"spark.hadoop.fs.file.impl": "msglake.hadoop.LocalFileSystem",
            "spark.hadoop.fs.AbstractFileSystem.file.impl": "msglake.hadoop.LocalFs"}


def local_fs_conf(settings: Settings, master: str, given: dict[str, str]) -> dict[str, str]:
    """Spark settings that make the ``file:`` scheme msglake's own local file system, in local mode.

    Without Hadoop's native library, Hadoop starts a ``chmod`` process for every file and folder
    it creates (about 3.5 per Parquet file) and a ``readlink`` process for every rename (a Delta
    commit or a checkpoint file: about 20 processes each). A micro-batch spread over a thousand
    topic partitions writes a thousand files and waited on those processes for most of its
    write: 1,000 files of 5 rows each took 11.2 s to Delta, 4.0 s with these classes
    (``jars/src``), which do the same with system calls. They must be on the JVM's class path
    from its start (Spark resolves file systems before it adds ``spark.jars``), so the jar goes on
    ``spark.driver.extraClassPath``; in local mode the driver is the executor. Nothing changes
    when the jar was not built, on a cluster (``local-cluster`` too: its executors are JVMs of
    their own), under spark-submit, or when ``given`` (the settings' ``spark.conf``) names either
    file system itself.
    """
    jar = jars_dir(settings) / LOCAL_FS_JAR
    in_driver = is_local(master) and not master.startswith("local-cluster[")  # its executors: JVMs of their own
    if submitted() or not in_driver or not jar.is_file() or any(k in given for k in LOCAL_FS):
        return {}
    classpath = os.pathsep.join(p for p in (given.get("spark.driver.extraClassPath"), str(jar)) if p)
    return {"spark.driver.extraClassPath": classpath, **LOCAL_FS}


#: The garbage collector of a local driver (in local mode it runs the tasks too). The JVM's default
#: (G1) spends CPU on concurrent marking and remembered-set refinement to keep its pauses short; on
#: a machine of a few cores that is CPU the tasks and the JIT compilers wait for, and a batch job's
#: throughput gains nothing from the short pauses.
LOCAL_DRIVER_GC = "-XX:+UseParallelGC"


#: The JIT of a driver JVM started for a small job (``build_session(small=True)``): C1 only.
#: HotSpot's optimizing compiler, C2, took 13-20 s of CPU in a replay of seven messages, on two
#: cores, and pays back only over a longer run; C1 compiles quickly. ``msglake replay`` of the
#: worked example, a new process: 16.1-16.8 -> 13.0-13.1 s.
SMALL_JOB_JIT = "-XX:TieredStopAtLevel=1"


def is_local(master: str) -> bool:
    """True for the in-process masters (``local``, ``local[N]``, ``local[*]``...)."""
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def submitted() -> bool:
    """True inside ``spark-submit pipelines/submit.py``: spark-submit owns master, jars and py-files."""
    return os.environ.get("MSGLAKE_SPARK_SUBMIT") == "1"


def log_file(settings: Settings) -> Path:
    """Where Spark's own output goes: ``<lake>/_logs/spark.log`` when the lake root exists and is
    writable, else ``msglake-logs/spark.log`` in the system temp folder (a read-only lake, or one
    not made yet: a query must not create it)."""
    root = Path(settings.lake.root)
    folder = Path(settings.lake.log_dir())
    if not (root.is_dir() and os.access(root, os.W_OK)):
        folder = Path(tempfile.gettempdir(), "msglake-logs")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="msglake-logs-"))
    return folder / "spark.log"


@contextmanager
def _children_write_to(path: Path):
    """Processes started inside inherit ``path`` as their stdout and stderr; this process keeps its own.

    The JVM and the Python workers it starts print log lines, JVM warnings ("Using incubator
    modules") and worker messages on stderr: they go to the log file, not the user's terminal.
    Nothing of theirs belongs on stdout either, and a JVM holding this process's stdout kept a
    pipe open past msglake's exit until its shutdown ended: ``msglake ... | tee`` or a script
    capturing the output waited about 0.5 s more for every command.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {n: os.dup(n) for n in (1, 2)}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for n in saved:
            os.dup2(fd, n)
        yield
    finally:
        for n, kept in saved.items():
            os.dup2(kept, n)
            os.close(kept)
        os.close(fd)


def _quiet_query_context_loggers() -> None:
    """PySpark logs every failed query as a JSON record with a stack trace on stderr before it
    raises; msglake reports the error itself, as one line (the records stay with --verbose)."""
    if logging.getLogger("msglake").isEnabledFor(logging.DEBUG):
        return
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def driver_java_options(settings: Settings, master: str, small: bool = False) -> str:
    """The driver JVM's options (``spark.driver.extraJavaOptions``) when msglake starts it: its
    log configuration; in local mode also the collector, the class archive when ``make setup``
    made it (4-5 s less per start) and, for a ``small`` job, :data:`SMALL_JOB_JIT`."""
    from msglake.pipelines import class_archive

    options = [f"-Dlog4j.configurationFile=file:{LOG4J}"]
    if is_local(master):
        options += [LOCAL_DRIVER_GC] + ([SMALL_JOB_JIT] if small else [])
        archive = class_archive.archive_path(settings)
        if archive.is_file():
            options += [f"-XX:SharedArchiveFile={archive}", class_archive.QUIET]
    return " ".join(options)


def build_session(settings: Settings, app_name: str | None = None, master: str | None = None, *,
                  segments: bool = True, small: bool = False):
    """Create (or return the running) SparkSession for ``settings``.

    Delta's SQL extension and catalog are set, the driver is bound to 127.0.0.1, time is
    UTC, the ``msglake`` data source is registered (with ``segments``) and the lake's tables
    are in the catalog. ``spark.conf`` entries of the settings override the defaults set here.

    ``segments=False`` leaves the data source unregistered, for a command that reads only the
    lake's tables: the first registration in a JVM starts Spark's search for installed Python
    data sources, a Python process of its own (about 1 s of a command's start). A later call
    with ``segments=True`` registers it.

    ``small``: the command's input is known, before the JVM starts, to be a small job's
    (:data:`SMALL_JOB_ROWS`): a local driver JVM then compiles with C1 only (:data:`SMALL_JOB_JIT`).

    On a cluster master (``spark://``, ``yarn``, ``k8s://``) the executors get msglake's code
    as a zip (:func:`msglake.pipelines.io.package.build_pyfiles`) and the Delta jars through ``spark.jars``
    (served by the driver). Under ``spark-submit`` (:mod:`msglake.pipelines.submit`) the master, jars
    and py-files given to spark-submit are used as they are.
    """
    from pyspark.sql import SparkSession

    from msglake.pipelines.io.catalog import register_tables
    from msglake.pipelines.jvm_names import remember_names

    # The hostname resolves oddly on some machines: keep Spark on loopback unless told otherwise.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (data source planning and reading) must import msglake's packages:
    # run them on this interpreter, the one msglake is installed in.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": str(Path(settings.lake.root, "_warehouse").resolve()),
        # Arrow batches from the Python source go straight to the JVM.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        # base64() without a line break every 76 characters (JSON output, raw bytes in reports).
        "spark.sql.chunkBase64String.enabled": "false",
        # HotSpot does not compile a method of over 8,000 bytes of bytecode (HugeMethodLimit), and a
        # whole-stage method with the quality rules inlined is larger: it ran interpreted. Above the
        # limit Spark now evaluates that part of the plan without whole-stage codegen, in methods
        # the JIT compiles (ingest's messages rows with their counts, 1.19M RocketMQ rows, warm:
        # 16.5-17.5 -> 7.7-9.1 s).
        "spark.sql.codegen.hugeMethodLimit": "8000",
        # Off: with it, every pyspark function call (F.col, select, ...) costs about 10 more JVM round
        # trips to record its Python call site for error contexts, which msglake does not show; a
        # micro-batch's plans make thousands of such calls (measured: 13 round trips -> 1-3 per F.col).
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # The stage progress bar fills non-terminal logs with thousands of lines; msglake has its own.
        "spark.ui.showConsoleProgress": "false",
        **{f"spark.hadoop.parquet.enable.dictionary#{c}": "false" for c in UNIQUE_VALUED_COLUMNS},
    }
    builder = SparkSession.builder.appName(app_name or settings.spark.appName)
    master = master or settings.spark.master
    if not submitted():
        conf["spark.jars"] = ",".join(delta_jars(settings))
        conf["spark.driver.extraJavaOptions"] = driver_java_options(settings, master, small)
        builder = builder.master(master)
    given = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.spark.conf.items()}
    conf.update(given)
    conf.update(local_fs_conf(settings, master, given))
    for k, v in conf.items():
        builder = builder.config(k, v)
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None and not submitted():
        with _children_write_to(log_file(settings)):
            spark = builder.getOrCreate()
    else:
        spark = builder.getOrCreate()
    remember_names(spark)
    spark.sparkContext.setLogLevel("WARN")
    _quiet_query_context_loggers()
    if not submitted() and not is_local(master):
        from msglake.pipelines.io.package import build_pyfiles

        spark.sparkContext.addPyFile(build_pyfiles())
    if segments:
        from msglake.pipelines.io.source import MsglakeDataSource

        spark.dataSource.register(MsglakeDataSource)
    register_tables(spark, settings)
    return spark


#: A small job: at most this many input rows. It evaluates Spark's expressions interpreted
#: (:func:`sized_for`), and a driver started for it compiles with C1 only (:data:`SMALL_JOB_JIT`).
#: Around 20K rows the two ways of evaluating cost the same (a replay of bench_replay.py's lake,
#: below).
SMALL_JOB_ROWS = 10_000
#: What :func:`sized_for` sets for a small job, with Spark's defaults: no code generation, and
#: no adaptive query execution.
SMALL_JOB_CONF = {"spark.sql.codegen.wholeStage": ("true", "false"),
                  "spark.sql.codegen.factoryMode": ("FALLBACK", "NO_CODEGEN"),
                  "spark.sql.adaptive.enabled": ("true", "false")}


@contextmanager
def setting(spark, key: str, value: str):
    """Within, the session's ``key`` is ``value``; on the way out it is what it was (unset, if it
    was not set). The setting is the session's: a job another thread plans meanwhile sees it too."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


@contextmanager
def sized_for(spark, small: bool):
    """Within, the session's jobs evaluate their expressions interpreted and are planned once,
    without adaptive query execution, when ``small`` (the job reads at most
    :data:`SMALL_JOB_ROWS` rows); True when they are.

    Spark compiles Java source for every plan it runs (whole-stage code, projections,
    predicates, orderings), and the JVM then interprets the compiled classes until its JIT has
    compiled them too: on a few thousand rows that costs more than it saves, and a replay runs
    dozens of plans. Measured with ``msglake replay`` of the worked example (seven messages): a
    new process 15.1-15.2 -> 12.2-12.6 s, warm 3.7-4.8 -> 3.1-4.4 s; of bench_replay.py's lake,
    warm: 20K messages 13.1 s either way, 200K 16.8 s compiled against 27.1 s interpreted.
    Adaptive execution plans each shuffle's and broadcast's consumers again once it has run, a
    job of its own per stage, to fit partitions and joins to data that a small job does not
    have: the worked example's ``msglake replay`` as a new process, its replay (after the
    session is up) with and without it, alternated five times: 8.4-11.3 s -> 8.0-10.7 s
    (median 9.0 -> 8.6 s, lower in every pair; the same output). The
    session's settings are left alone when any key is not at Spark's default (a user's own
    choice), and are set back on the way out. The settings are the session's: a job another
    thread runs on it meanwhile runs this way too (the same results; slower, if it is large).
    """
    if not small or any(spark.conf.get(key) != default for key, (default, _) in SMALL_JOB_CONF.items()):
        yield False
        return
    for key, (_, value) in SMALL_JOB_CONF.items():
        spark.conf.set(key, value)
    try:
        yield True
    finally:
        for key in SMALL_JOB_CONF:
            spark.conf.unset(key)
