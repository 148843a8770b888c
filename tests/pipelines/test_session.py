"""The session factory's sizing of a job: a small job's driver JIT, its interpreted expressions, no AQE."""
from __future__ import annotations

import pytest

from msglake.pipelines.session import SMALL_JOB_CONF, SMALL_JOB_JIT, driver_java_options, sized_for

from tests.conftest import make_settings


def test_a_small_jobs_local_driver_compiles_with_c1_only(tmp_path):
    settings = make_settings(tmp_path / "lake")
    assert SMALL_JOB_JIT in driver_java_options(settings, "local[2]", small=True).split()
    assert SMALL_JOB_JIT not in driver_java_options(settings, "local[2]").split()
    # a cluster's driver plans for executors of their own: left alone
    assert SMALL_JOB_JIT not in driver_java_options(settings, "spark://127.0.0.1:7077", small=True).split()


def whole_stage(spark) -> bool:
    """Whether Spark plans a simple query with whole-stage generated code (``*(1)`` in the plan)."""
    return "*(" in spark.range(3).selectExpr("id + 1 AS x")._jdf.queryExecution().executedPlan().toString()


def test_a_small_job_runs_interpreted_and_the_session_is_set_back(spark):
    defaults = {key: default for key, (default, _) in SMALL_JOB_CONF.items()}
    assert {key: spark.conf.get(key) for key in SMALL_JOB_CONF} == defaults and whole_stage(spark)
    with sized_for(spark, True) as interpreted:
        assert interpreted and not whole_stage(spark)
        assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
        assert spark.range(3).selectExpr("sum(id * 2) AS s").first()["s"] == 6
    assert {key: spark.conf.get(key) for key in SMALL_JOB_CONF} == defaults and whole_stage(spark)
    with sized_for(spark, False) as interpreted:
        assert not interpreted and whole_stage(spark)
    with pytest.raises(ZeroDivisionError), sized_for(spark, True):
        raise ZeroDivisionError  # a job that fails leaves the session as it found it too
    assert {key: spark.conf.get(key) for key in SMALL_JOB_CONF} == defaults


def test_a_users_own_code_generation_setting_is_left_alone(spark):
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    try:
        with sized_for(spark, True) as interpreted:
            assert not interpreted and spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
        assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
    finally:
        spark.conf.unset("spark.sql.codegen.wholeStage")


def test_the_driver_jvm_writes_to_the_log_not_to_the_commands_output(spark):
    # A JVM holding msglake's stdout kept a pipe open until its shutdown ended, after msglake had
    # exited: a script capturing the output waited for it. Both its streams go to the log file.
    import os

    jvm = spark.sparkContext._gateway.proc.pid
    stdout, stderr = (os.readlink(f"/proc/{jvm}/fd/{n}") for n in (1, 2))
    assert stdout == stderr and stdout.endswith("spark.log")
    assert stdout != os.readlink(f"/proc/{os.getpid()}/fd/1")
