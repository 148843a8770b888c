"""``msglake demo``: the whole pipeline on sample data, end to end."""
from __future__ import annotations

from msglake.pipelines.cli.common import load_settings

DEMO_MESSAGES = 20_000


def register(sub, common) -> None:
    demo = sub.add_parser(
        "demo", parents=[common], help="generate sample NSQ and RocketMQ data, ingest both, and show the tables",
        description="End to end on the embedded default: writes sample nsqd segments to demo-data/nsq and a "
                    "sample RocketMQ store to demo-data/rocketmq (bad records among them), ingests both with "
                    "local Spark into the same tables in ./lake, replays the delivery semantics with the "
                    "settings' policies, writes a data-quality report and prints what the lake holds through "
                    "Spark SQL. Run it again to see that a re-run adds nothing.",
    )
    demo.add_argument("--messages", type=int, default=DEMO_MESSAGES,
                      help=f"sample messages per broker (default {DEMO_MESSAGES:,})")
    demo.add_argument("--fresh", action="store_true", help="delete the demo data and lake first")
    demo.set_defaults(handler=demo_command)


def demo_command(args) -> int:
    from msglake.pipelines.io.paths import check_lake_root
    from msglake.pipelines.jobs.demo import prepare_data, run_demo
    from msglake.pipelines.session import build_session

    settings = load_settings(args)
    check_lake_root(settings.lake.root, write=True)

    def say(line: str) -> None:
        print(line, flush=True)

    prepare_data(settings, args.messages, args.fresh, say)
    spark = build_session(settings)
    return run_demo(spark, settings, say)
