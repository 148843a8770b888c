"""Codecs by format name: the one place that knows which formats exist."""
from __future__ import annotations

from formats.base import SegmentCodec
from formats.nsq_ext import NsqExtCodec

CODECS = {NsqExtCodec.name: NsqExtCodec}


def get_codec(name: str, store_host: str | None = None) -> SegmentCodec:
    """The codec for ``name`` (``nsq-ext``); ``ValueError`` naming the known formats otherwise."""
    try:
        cls = CODECS[name]
    except KeyError:
        raise ValueError(f"format {name!r} is not known; use one of {sorted(CODECS)}") from None
    return cls(store_host=store_host)
