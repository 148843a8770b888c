"""Codecs by format name: the one place that knows which formats exist."""
from __future__ import annotations

import inspect

from formats.base import SegmentCodec
from formats.nsq_ext import NsqExtCodec
from formats.rocketmq_commitlog import RocketMqCommitLogCodec

CODECS = {c.name: c for c in (NsqExtCodec, RocketMqCommitLogCodec)}


def codec_options(name: str) -> tuple[str, ...]:
    """Keyword options the codec of ``name`` takes (``store_host``, ``delay_levels``, ...)."""
    params = inspect.signature(_codec_class(name)).parameters
    return tuple(p for p in params if p != "chunk_bytes")


def _codec_class(name: str):
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"format {name!r} is not known; use one of {sorted(CODECS)}") from None


def get_codec(name: str, **options) -> SegmentCodec:
    """The codec for ``name`` with ``options`` (None values left at the codec's default).

    An option the format does not take is an error naming it, so a setting is never ignored.
    """
    cls = _codec_class(name)
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(codec_options(name)))
    if unknown:
        raise ValueError(f"format {name!r} does not take option(s) {unknown}; it takes {list(codec_options(name))}")
    return cls(**given)


#: User-facing option names (settings keys and data source options) -> codec keywords.
OPTION_NAMES = {
    "storeHost": "store_host",
    "delayLevels": "delay_levels",
    "decompress": "decompress",
    "fileSize": "file_size",
    "verifyCrc": "verify_crc",
}


def inapplicable(name: str, given: dict) -> list[str]:
    """User-facing options in ``given`` (set, not None) that the format ``name`` does not take."""
    takes = set(codec_options(name))
    return sorted(k for k, v in given.items() if v is not None and OPTION_NAMES[k] not in takes)
