"""The session's JVM view (msglake.pipelines.jvm_names): a class or static method is resolved by
the JVM once; calls, fields, packages and errors still go to the JVM every time."""
from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.sql import functions as F

from msglake.pipelines.jvm_names import RememberingView, remember_names


@contextmanager
def commands(spark):
    """The py4j commands this thread sends to the JVM inside the block, as (command, subcommand)
    pairs. Other threads' commands (py4j's finalizer releasing objects, callbacks) are left out."""
    client = spark.sparkContext._gateway._gateway_client
    me = threading.get_ident()
    sent: list[tuple[str, str]] = []
    send = client.send_command

    def counting(command, *args, **kwargs):
        if threading.get_ident() == me and not command.startswith("m\n"):
            kind, sub = (command.split("\n", 2) + ["", ""])[:2]
            sent.append((kind, sub if kind == "r" else ""))
        return send(command, *args, **kwargs)

    client.send_command = counting
    try:
        yield sent
    finally:
        del client.send_command  # the class's method again


#: py4j's reflection subcommands: resolve a name in a JVM view, get a member of a class.
RESOLVE, MEMBER, CALL = ("r", "u"), ("r", "m"), ("c", "")


def test_the_session_factory_installs_one_view_for_pyspark_and_the_session(spark):
    view = SparkContext._jvm
    assert isinstance(view, RememberingView)
    assert spark._jvm is view
    remember_names(spark)  # a session built again on the same gateway
    assert SparkContext._jvm is view and spark._jvm is view
    assert spark.newSession()._jvm is view


def test_a_class_and_its_method_are_asked_for_once(spark):
    jvm = SparkContext._jvm
    name = "org.apache.spark.sql.functions"
    jvm._classes.pop(name, None)  # another test may have resolved it already
    with commands(spark) as first:
        col = getattr(jvm, name).col
    assert first == [RESOLVE, MEMBER]  # the class, then the member
    with commands(spark) as again:
        assert getattr(jvm, name).col is col
        made = col("x")
    assert again == [CALL]  # only the call
    assert made.toString() == "x"


def test_a_simple_name_from_pysparks_imports_resolves_as_before(spark):
    jvm = SparkContext._jvm
    jvm._classes.pop("PythonSQLUtils", None)
    assert jvm.PythonSQLUtils._fqn == "org.apache.spark.sql.api.python.PythonSQLUtils"
    with commands(spark) as again:
        assert jvm.PythonSQLUtils._fqn == "org.apache.spark.sql.api.python.PythonSQLUtils"
    assert again == []
    # and PySpark's own calls through the view give the same results
    assert spark.range(3).select(F.sum(F.col("id") + F.lit(1)).alias("s")).first()["s"] == 6


def test_fields_packages_and_unknown_names_are_asked_for_every_time(spark):
    jvm = SparkContext._jvm
    integer = getattr(jvm, "java.lang.Integer")
    for _ in range(2):
        with commands(spark) as sent:
            assert integer.MAX_VALUE == 2**31 - 1  # a static field is a value: never remembered
        assert sent == [MEMBER]
    for _ in range(2):
        with commands(spark) as sent:
            jvm.msglake_no_such_package  # py4j answers a package for a name it cannot resolve
        assert sent == [RESOLVE]
    assert "msglake_no_such_package" not in jvm._classes
    functions = getattr(jvm, "org.apache.spark.sql.functions")
    for _ in range(2):
        with pytest.raises(Py4JError, match="no_such_method does not exist"):
            functions.no_such_method
    assert "no_such_method" not in functions._members


def test_nested_classes_and_constructors_work_through_remembered_classes(spark):
    jvm = SparkContext._jvm
    entry = getattr(jvm, "java.util.Map").Entry
    assert entry._fqn == "java.util.Map$Entry"
    with commands(spark) as again:
        assert getattr(jvm, "java.util.Map").Entry is entry
    assert again == []
    array_list = getattr(jvm, "java.util.ArrayList")
    made = array_list()
    made.add("a")
    assert made.size() == 1 and array_list().size() == 0  # a new object each call
    with commands(spark) as sent, pytest.raises(AttributeError):
        array_list.__wrapped__  # a magic name never reaches the JVM
    assert sent == []


def test_without_a_gateway_nothing_is_installed(monkeypatch):
    monkeypatch.setattr(SparkContext, "_jvm", None)

    class Session:
        pass

    session = Session()
    remember_names(session)
    assert SparkContext._jvm is None and not hasattr(session, "_jvm")
