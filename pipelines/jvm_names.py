"""The driver's view of the JVM, remembering the classes and static methods it has resolved.

py4j resolves a name by asking the JVM every time: ``F.col("x")`` is one round trip to find
``org.apache.spark.sql.functions``, one to learn that ``col`` is a method of it, and only then
the call. PySpark names ``functions``, ``PythonUtils`` and ``PythonSQLUtils`` by their simple
names, which the JVM first looks up in the default package (and the last two in several of
PySpark's imported packages) before it finds them: every miss a search of the whole class path
(about 280 jars), as class loaders remember no misses. A warm replay of the seven-message
worked example made 3,300 such lookups (of ~10,400 round trips), about 0.7 s of its 4 s.

The classes and methods of a running JVM do not change, so the view installed here asks once
per name: a class the first time it is named, a static method the first time it is got from
its class. Static fields are values and are asked for every time, and so are packages and
names that do not resolve (nothing is remembered for them). One thing can change what a
simple name means: a ``java_import`` on this view after a class was remembered under that
name (PySpark's own later imports add no class it names this way); code that imports more
should name classes in full.
"""
from __future__ import annotations

from py4j.java_gateway import JavaClass, JavaMember, JVMView


class RememberingClass(JavaClass):
    """A :class:`JavaClass` that remembers its static methods and nested classes."""

    def __init__(self, cls: JavaClass):
        self.__dict__.update(cls.__dict__)
        self._members: dict[str, JavaMember | JavaClass] = {}

    def __getattr__(self, name: str):
        # Only called for names that are not attributes of this object: py4j's members. Read
        # through __dict__: an object made without __init__ (copy.copy) has no _members yet, and
        # self._members would come back here without end.
        members = self.__dict__.get("_members")
        hit = members.get(name) if members is not None else None
        if hit is None:
            hit = JavaClass.__getattr__(self, name)
            if members is not None and isinstance(hit, (JavaMember, JavaClass)):
                members[name] = hit
        return hit


class RememberingView(JVMView):
    """A :class:`JVMView` (``SparkContext._jvm``) that remembers the classes it resolved."""

    def __init__(self, view: JVMView):
        self.__dict__.update(view.__dict__)
        self._classes: dict[str, RememberingClass] = {}

    def __getattr__(self, name: str):
        classes = self.__dict__.get("_classes")  # as RememberingClass reads _members
        hit = classes.get(name) if classes is not None else None
        if hit is None:
            hit = JVMView.__getattr__(self, name)
            if classes is not None and isinstance(hit, JavaClass):
                hit = classes[name] = RememberingClass(hit)
        return hit


def remember_names(spark) -> None:
    """Give PySpark (``SparkContext._jvm``, and the session's own reference to it) a view that
    remembers what it resolved. Idempotent: a session built again on the same gateway keeps it."""
    from pyspark import SparkContext

    view = SparkContext._jvm
    if view is None:
        return
    if not isinstance(view, RememberingView):
        view = SparkContext._jvm = RememberingView(view)
    spark._jvm = view
