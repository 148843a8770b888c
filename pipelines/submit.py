"""``spark-submit`` entry point: the msglake command's jobs on the cluster spark-submit names.

::

    spark-submit --master spark://host:7077 --py-files msglake-<digest>.zip \\
        --jars <the Delta jars, comma-separated> pipelines/submit.py ingest --conf /shared/msglake.yaml

Arguments are those of ``msglake`` (``ingest``, ``stream``, ...). spark-submit decides the
master, the jars and the py-files; the session factory then leaves them alone. ``msglake
package`` prints a ready command line.
"""
from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    os.environ["MSGLAKE_SPARK_SUBMIT"] = "1"  # read by pipelines.session.build_session
    from msglake.pipelines.cli import main as cli

    return cli(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
