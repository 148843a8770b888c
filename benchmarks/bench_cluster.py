"""Ingest throughput through a two-worker Spark standalone cluster next to local mode, same data.

    .venv/bin/python benchmarks/bench_cluster.py [--messages 300000]

Generates an NSQ data set once (bench-data/), then runs `msglake ingest` three times as a
user would, each into a fresh lake: local[2], and on a standalone cluster of two 1-core
workers on loopback, via `msglake ingest --master spark://...` and via spark-submit of
pipelines/submit.py. Row counts are checked; the result goes to benchmarks/results/.
On one 2-core machine the cluster cannot beat local mode (same cores, plus executor JVMs
and a network hop); the figures show what the distribution costs, not a scale-out.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from results_file import write  # benchmarks/ is on sys.path when a script in it runs

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=300_000, help="messages in the data set (default 300,000)")
    args = p.parse_args()

    from msglake.samples.nsq import generate
    from msglake.pipelines import settings as S
    from tests.cluster import standalone
    from msglake.pipelines.io.package import build_pyfiles
    from msglake.pipelines.session import delta_jars

    data = REPO / "bench-data" / f"cluster-nsq-{args.messages}"
    if not (data / ".complete").exists():
        shutil.rmtree(data, ignore_errors=True)
        truth = generate(str(data), args.messages, max_bytes_per_file=64 << 20, bad_inputs=False)
        (data / ".complete").write_text(str(len(truth.messages)))
    expected = int((data / ".complete").read_text())
    work = REPO / "bench-data" / "cluster-run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    doc = S.from_dict(S.default_document()).model_dump()
    doc["sources"] = [{"name": "bench", "format": "nsq-ext", "path": str(data)}]
    doc["ingest"]["maxBytesPerTrigger"] = 64 << 20
    conf = work / "bench.yaml"
    conf.write_text(yaml.safe_dump(doc))
    settings = S.from_dict(doc)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    results = {}

    def run(name: str, cmd: list[str]) -> None:
        started = time.monotonic()
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
        if r.returncode != 0:
            raise SystemExit(f"{name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        lines = [line.strip() for line in r.stdout.splitlines()]
        decoded = next(int(line.split()[1].replace(",", "")) for line in lines if line.startswith("decoded"))
        assert decoded == expected, (name, decoded, expected)
        # "source bench: N batch(es) in 12.3s": the query alone, without JVM start and set-up.
        job = float(next(line for line in lines if line.startswith("source ")).rsplit(" in ", 1)[1].rstrip("s"))
        results[name] = {"command_seconds": seconds, "query_seconds": job, "messages_per_s": expected / job}
        print(f"{name:<30} query {job:6.1f} s = {expected / job:>8,.0f} msg/s   (whole command {seconds:6.1f} s)",
              flush=True)

    msglake = [str(BIN / "msglake"), "ingest", "--conf", str(conf), "--quiet"]
    run("local[2]", [*msglake, "--lake", str(work / "lake-local"), "--master", "local[2]"])
    with standalone(work / "cluster", workers=2, cores=1, memory="3g") as cluster:
        run("standalone, msglake --master", [*msglake, "--lake", str(work / "lake-cli"), "--master", cluster.master_url])
        run("standalone, spark-submit", [
            str(BIN / "spark-submit"), "--master", cluster.master_url, "--py-files", build_pyfiles(),
            "--jars", ",".join(delta_jars(settings)), "--conf", "spark.driver.host=127.0.0.1",
            str(REPO / "pipelines" / "submit.py"), "ingest", "--conf", str(conf), "--quiet",
            "--lake", str(work / "lake-submit")])
    write("cluster", {"messages": expected, "runs": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
