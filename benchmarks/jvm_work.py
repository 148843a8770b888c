"""What a Spark run cost the driver JVM besides running tasks: the classes Spark generated and
compiled (Janino: its compile calls, one generated class each), the JIT compilers' compile time
(summed over their threads), its garbage collection, its CPU (user and system).

    work = JvmWork(spark); before = work.now(); ...; print(work.since(before))

In local mode the driver JVM runs the tasks too, so its JIT competes with them for the cores."""
from __future__ import annotations

import os


class JvmWork:
    def __init__(self, spark):
        jvm = spark._jvm
        self._mf = jvm.java.lang.management.ManagementFactory
        self._codegen = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
        self._stat = f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/stat"
        self._tick_ms = 1000 / os.sysconf("SC_CLK_TCK")

    def now(self) -> dict:
        with open(self._stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return {"classesCompiled": self._codegen.getCount(),
                "jitMs": self._mf.getCompilationMXBean().getTotalCompilationTime(),
                "gcMs": sum(b.getCollectionTime() for b in self._mf.getGarbageCollectorMXBeans()),
                "cpuMs": round((int(fields[11]) + int(fields[12])) * self._tick_ms)}

    def since(self, before: dict, after: dict | None = None) -> dict:
        """The work from ``before`` to ``after`` (two :meth:`now` readings; by default, now)."""
        after = self.now() if after is None else after
        return {k: v - before[k] for k, v in after.items()}


def line(work: dict) -> str:
    return (f"{work['classesCompiled']} classes generated, JIT compile time {work['jitMs'] / 1000:.1f} s, "
            f"GC {work['gcMs'] / 1000:.1f} s, JVM CPU {work['cpuMs'] / 1000:.1f} s")
