"""Options, each declared once as a field of a typed model.

A codec's options are one :class:`Options` model next to the codec (``NsqExtCodec.Options``):
its field names are what a user writes in a source entry of the settings YAML and in
``spark.readStream.option(...)``; the settings validate a source entry with that model (typed
YAML values, strictly), the Spark data source parses its string options with it
(:meth:`Options.from_strings`, leniently: ``"true"``, ``"65536"``), and the codec takes the
validated instance. No other code lists, converts or checks an option.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from msglake.errors import ConfigError

PositiveInt = Annotated[int, Field(gt=0)]


def _host_port(v: str) -> str:
    if not re.match(r"^\[?[0-9A-Za-z.:-]+\]?:\d{1,5}$", v):
        raise ValueError(f"expected host:port, got {v!r}")
    return v


#: ``host:port`` (an IPv6 host in brackets).
HostPort = Annotated[str, AfterValidator(_host_port)]


def describe(error: ValidationError, prefix: str = "") -> list[str]:
    """One ``key: problem`` line per error of a pydantic validation, keys as dotted paths."""
    lines = []
    for err in error.errors():
        key = ".".join(str(p) for p in err["loc"])
        key = f"{prefix}.{key}" if prefix and key else (prefix or key or "(top level)")
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        if err["type"] != "extra_forbidden" and "input" in err and not isinstance(err["input"], (dict, list)):
            msg += f" (got {err['input']!r})"
        lines.append(f"{key}: {msg}")
    return lines


class Options(BaseModel):
    """Base of every options model: unknown keys and wrong types are errors; instances are frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(cls.model_fields)

    @classmethod
    def from_strings(cls, raw: Mapping[str, object], origin: str) -> Self:
        """Validate options given as strings in any letter case (Spark's ``.option()`` values).

        Empty values count as not given. Errors name ``origin`` and the option.

        >>> class Demo(Options):
        ...     verifyCrc: bool = True
        >>> Demo.from_strings({"verifycrc": "false"}, "demo").verifyCrc
        False
        >>> Demo.from_strings({"crc": "x"}, "demo")
        Traceback (most recent call last):
        msglake.errors.ConfigError: demo: unknown option 'crc' (known: verifyCrc)
        """
        by_lower = {n.lower(): n for n in cls.model_fields}
        doc = {}
        for key, value in raw.items():
            name = by_lower.get(key.lower())
            if name is None:
                raise ConfigError(f"{origin}: unknown option {key!r} (known: {', '.join(cls.model_fields)})")
            if value is not None and value != "":
                doc[name] = value
        try:
            return cls.model_validate(doc, strict=False)
        except ValidationError as e:
            raise ConfigError(f"{origin}: " + "; ".join(describe(e))) from None

    def to_strings(self) -> dict[str, str]:
        """The options set to something other than their default, as Spark option strings."""
        out = {}
        for name, value in self.model_dump(exclude_defaults=True).items():
            if value is not None:
                out[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


class CodecOptions(Options):
    """Base of a codec's options model: what every codec takes."""

    #: Decode with the native core (``native/``, when installed): ``false`` forces the Python
    #: path; unset, the ``MSGLAKE_NATIVE`` environment variable decides (on unless ``0``).
    native: bool | None = None
