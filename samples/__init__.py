"""Sample data in the brokers' real on-disk layouts, with the ground truth of what it holds.

Encoders (``nsq_writer``, ``rocketmq_writer``) write segment bytes as the brokers do;
generators (``nsq``, ``rocketmq``) fill a data path with messages and every kind of corrupt
record; ``truth`` describes what a decoder must find. Used by ``msglake generate``, the demo,
the tests and the benchmarks; nothing here decodes.
"""
from __future__ import annotations


def generate(fmt: str, out: str, messages: int, seed: int = 7, segment_bytes: int = 4 << 20,
             bad_inputs: bool = True):
    """Write ``messages`` sample messages of broker format ``fmt`` under ``out``; returns the ground truth.

    ``segment_bytes``: NSQ rolls to a new segment past this size; RocketMQ's fixed CommitLog file size.
    """
    if fmt == "rocketmq-commitlog":
        from msglake.samples.rocketmq import generate as rocketmq

        return rocketmq(out, messages, seed=seed, file_size=segment_bytes, bad_inputs=bad_inputs)
    if fmt == "nsq-ext":
        from msglake.samples.nsq import generate as nsq

        return nsq(out, messages, seed=seed, max_bytes_per_file=segment_bytes, bad_inputs=bad_inputs)
    raise ValueError(f"no sample generator for format {fmt!r}")
