"""Codecs by format name: the one place that knows which formats exist."""
from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from msglake.errors import ConfigError
from msglake.formats.base import SegmentCodec
from msglake.formats.nsq_ext import NsqExtCodec
from msglake.formats.options import Options, describe
from msglake.formats.rocketmq_commitlog import RocketMqCommitLogCodec

CODECS = {c.name: c for c in (NsqExtCodec, RocketMqCommitLogCodec)}


def codec_class(name: str) -> type:
    """The codec class of format ``name``; an unknown name is an error listing the known ones."""
    try:
        return CODECS[name]
    except KeyError:
        raise ConfigError(f"format {name!r} is not known; use one of {sorted(CODECS)}") from None


def get_codec(name: str, options: Options | Mapping | None = None) -> SegmentCodec:
    """The codec for ``name`` with its options (a validated model, or a mapping of typed values).

    >>> get_codec("rocketmq-commitlog", {"verifyCrc": False}).verify_crc
    False
    """
    cls = codec_class(name)
    if options is None or isinstance(options, cls.Options):
        return cls(options)
    if isinstance(options, Options):
        raise ConfigError(f"format {name!r} takes {cls.Options.__name__}, not {type(options).__name__}")
    try:
        return cls(cls.Options.model_validate(dict(options)))
    except ValidationError as e:
        raise ConfigError(f"format {name!r}: " + "; ".join(describe(e))) from None
