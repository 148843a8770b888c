"""``msglake generate`` (sample broker data) and ``msglake package`` (the code zip for a cluster)."""
from __future__ import annotations

import os
import time

from msglake.pipelines.cli.common import add_verbose, load_settings


def register(sub, common) -> None:
    pkg = sub.add_parser(
        "package", parents=[common], help="build the code zip for a cluster and print a spark-submit line",
        description="Write msglake's Python packages as one zip for --py-files (named by a digest of the code) "
                    "and print it with the Delta jars and a spark-submit command that runs `msglake ingest` on a "
                    "cluster. `msglake ingest --master spark://...` does the same shipping by itself.",
    )
    pkg.add_argument("--out", metavar="DIR", default=os.environ.get("MSGLAKE_DIST_DIR", "dist"),
                     help="folder for the zip (env MSGLAKE_DIST_DIR; default ./dist)")
    pkg.set_defaults(handler=package)

    gen = sub.add_parser(
        "generate", help="write sample broker data (real on-disk layout) with known contents",
        description="Write sample NSQ extended-message segments and meta files, as nsqd lays them out, or a "
                    "RocketMQ store (commitlog/, consumequeue/, config/consumerOffset.json) as a broker does.",
    )
    gen.add_argument("out", help="folder to write (the nsqd --data-path, or the RocketMQ store root)")
    gen.add_argument("--format", choices=("nsq-ext", "rocketmq-commitlog"), default="nsq-ext",
                     help="which broker's layout (default nsq-ext)")
    gen.add_argument("--messages", type=int, default=10_000, help="good messages to write (default 10,000)")
    gen.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    gen.add_argument("--segment-bytes", type=int, default=4 << 20,
                     help="roll to a new segment file past this size; for RocketMQ, the fixed CommitLog file "
                          "size (default 4 MiB)")
    gen.add_argument("--no-bad-inputs", action="store_true", help="leave out the corrupt records and files")
    add_verbose(gen)
    gen.set_defaults(handler=generate)


def package(args) -> int:
    from msglake.pipelines.io.package import build_pyfiles
    from msglake.pipelines.session import delta_jars
    from msglake.pipelines import submit

    settings = load_settings(args)
    zip_path = build_pyfiles(os.path.abspath(args.out))
    jars = delta_jars(settings)
    print(f"code:  {zip_path}")
    print(f"jars:  {len(jars)} files in {os.path.dirname(jars[0])}")
    print("run on a cluster (the conf, segments, lake and checkpoints on storage every node sees):")
    print(f"  spark-submit --master {args.master or 'spark://HOST:7077'} --py-files {zip_path} \\\n"
          f"    --jars {','.join(jars)} \\\n    {submit.__file__} ingest --conf /shared/msglake.yaml")
    return 0


def generate(args) -> int:
    from msglake.samples import generate as write_samples

    started = time.monotonic()
    truth = write_samples(args.format, args.out, args.messages, args.seed, args.segment_bytes, not args.no_bad_inputs)
    retries = sum(1 for m in truth.messages if m.retry_of)
    print(f"wrote {len(truth.messages) - retries:,} messages (+{retries} producer retries) and "
          f"{len(truth.quarantined)} corrupt records to {os.path.abspath(args.out)} in {time.monotonic() - started:.1f}s")
    return 0
