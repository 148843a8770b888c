"""The ``msglake`` command: one module per group of subcommands, each a thin layer over the jobs.

Every subcommand parses its options, loads and checks the settings (and the folders it will
use) before Spark starts, calls a job of :mod:`msglake.pipelines.jobs` and prints its summary;
:func:`msglake.pipelines.cli.common.run` turns any error into one line and an exit status.
"""
from __future__ import annotations

import argparse
import sys

from msglake.pipelines.cli import demo, ingest, maintenance, quality, replay, sql, tools
from msglake.pipelines.cli.common import common_options, run

#: The modules that add subcommands, in the order ``--help`` lists them.
COMMANDS = (ingest, demo, sql, replay, maintenance, quality, tools)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="msglake",
        description="Turn message-broker segment files (NSQ extended disk queues, RocketMQ CommitLogs) into "
                    "Delta Lake tables.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_options()
    for module in COMMANDS:
        module.register(sub, common)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run(args.handler, args)
