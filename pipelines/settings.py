"""Typed, validated settings: the embedded default, overlaid by the user's YAML and the environment.

Every key is checked before any data is read: an unknown key or a wrong type fails with
the key's path, e.g. ``sources.0.storeHost: expected host:port, got 'nsqd'``.

Where settings come from, each overlaying the one before key by key (:func:`load`):

1. ``msglake.conf``'s ``base/msglake.yaml``, shipped inside the package (the embedded default);
2. ``conf/local/msglake.yaml`` under the directory msglake runs in, when present (git-ignored);
3. the file given by ``--conf`` / ``$MSGLAKE_CONF``;
4. ``$MSGLAKE_LAKE_ROOT``, ``$MSGLAKE_SPARK_MASTER``, ``$MSGLAKE_JARS_DIR``.

Mappings merge key by key; a list (``sources``) or a plain value replaces the one before, and
``null`` removes a key (back to its built-in default).
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model

from msglake.conf import DEFAULT_SETTINGS
from msglake.errors import ConfigError
from msglake.formats.options import PositiveInt, describe
from msglake.formats.registry import CODECS

#: The user's local overlay, relative to the directory msglake runs in.
LOCAL_CONF = Path("conf", "local", "msglake.yaml")

FORMATS = tuple(CODECS)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _lake_folder(v: str) -> str:
    if "`" in v:
        # Delta's own table builder names a table by its path inside backticks without escaping them.
        raise ValueError("a backtick (`) in the lake's folder is not supported: Delta Lake cannot create a table "
                         "under it; choose a folder without one")
    return v


class LakeSettings(_Strict):
    root: Annotated[str, AfterValidator(_lake_folder)] = "lake"

    def table_path(self, name: str) -> str:
        return str(Path(self.root, name).resolve())

    def checkpoint_path(self, name: str) -> str:
        return str(Path(self.root, "_checkpoints", name).resolve())

    def log_dir(self) -> str:
        """Where Spark's own log lines go (``<root>/_logs``): not to the user's terminal."""
        return str(Path(self.root, "_logs").resolve())


ConfValue = str | int | float | bool


class SparkSettings(_Strict):
    master: str = "local[2]"
    appName: str = "msglake"
    #: Folder holding the Delta jars (see :func:`msglake.pipelines.session.jars_dir`).
    jarsDir: str | None = None
    conf: dict[str, ConfValue] = Field(default_factory=dict)


class _Source(_Strict):
    """What every source entry has; its format's options come from the codec's options model."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    path: str
    #: Segment bytes per micro-batch of this source (default: ``ingest.maxBytesPerTrigger``).
    maxBytesPerTrigger: PositiveInt | None = None

    def codec_options(self):
        """The format options of this entry, as the codec's own options model."""
        options = type(self).codec_options_model
        return options.model_validate({k: getattr(self, k) for k in options.model_fields})


def _source_model(fmt: str, codec) -> type[_Source]:
    """``sources`` entries of format ``fmt``: the common fields plus the codec's options model's."""
    model = create_model(f"{codec.Options.__name__}Source", __base__=(_Source, codec.Options),
                         format=(Literal[fmt], ...))  # type: ignore[valid-type]
    model.codec_options_model = codec.Options
    return model


#: One ``sources`` entry: which model validates it is chosen by its ``format``.
SourceSettings = Annotated[Union[tuple(_source_model(f, c) for f, c in CODECS.items())],  # type: ignore[misc]
                           Field(discriminator="format")]


class IngestSettings(_Strict):
    # Measured on 4M NSQ messages, 2 cores: 256 MiB / 16 MiB gave 55K msg/s, 1 GiB / 64 MiB 87-93K
    # (fewer tasks, files and commits per message; memory stays bounded by the 8 MiB decode chunks).
    maxBytesPerTrigger: PositiveInt = 1 << 30
    splitBytes: PositiveInt = 64 << 20
    #: Mark producer retries arriving within this many seconds of the first copy (0: off).
    dedupWatermarkSeconds: Annotated[int, Field(ge=0)] = 600


NonNegativeInt = Annotated[int, Field(ge=0)]


class TopicPolicy(_Strict):
    """Delivery rules of the topics a pattern matches (docs/semantics.md §1); all optional."""

    messageTtlMs: NonNegativeInt | None = None
    deadLetterTopic: str | None = None
    deadLetterRoutingKey: str | None = None
    deadLetterExchange: str | None = None
    maxLength: NonNegativeInt | None = None
    maxLengthBytes: NonNegativeInt | None = None
    overflow: Literal["drop-head", "reject-publish", "reject-publish-dlx"] = "drop-head"
    maxDeliveries: NonNegativeInt | None = None
    maxPriority: Annotated[int, Field(ge=1, le=255)] | None = None
    maxDelayMs: NonNegativeInt = 40 * 24 * 3600 * 1000
    expiryAtHeadOnly: bool = False


def policy_dicts(policies: dict[str, TopicPolicy]) -> dict[str, dict]:
    """Topic policies as the plain mappings the transforms take (pattern -> policy fields)."""
    return {k: v.model_dump() for k, v in policies.items()}


def _rule_levels_model():
    """``quality.rules``: one optional field per rule of quality/rules.py, so an unknown rule name
    or level fails like any other key."""
    from pydantic import create_model

    from msglake.quality.rules import LEVELS, RULES

    level = Literal[LEVELS]  # type: ignore[valid-type]
    return create_model("RuleLevels", __base__=_Strict, **{n: (level, r.default) for n, r in RULES.items()})


RuleLevels = _rule_levels_model()


class QualitySettings(_Strict):
    """Row checks in the ingest stream and the data-quality reports (``msglake quality``)."""

    #: The broker's maximum message size (RocketMQ's ``maxMessageSize``, 4 MiB by default).
    maxMessageBytes: PositiveInt = 4 << 20
    #: How far ``storeTimestamp`` may be before ``bornTimestamp`` (producer and broker clocks differ).
    clockSkewMs: NonNegativeInt = 60_000
    rules: RuleLevels = Field(default_factory=RuleLevels)  # type: ignore[valid-type]
    #: Folder of the reports; default ``<lake root>/_reports``.
    reportDir: str | None = None

    def rule_context(self, policies: dict[str, TopicPolicy]):
        from msglake.quality.rules import RuleContext

        return RuleContext(policy_dicts(policies), self.maxMessageBytes, self.clockSkewMs)

    def levels(self) -> dict[str, str]:
        return self.rules.model_dump()


class Settings(_Strict):
    lake: LakeSettings = Field(default_factory=LakeSettings)
    #: Topic name or glob pattern -> its policy; the most specific match wins (exact names first,
    #: then the pattern with the most literal characters).
    policies: dict[str, TopicPolicy] = Field(default_factory=dict)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    sources: list[SourceSettings] = Field(default_factory=list)  # type: ignore[valid-type]
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)

    def report_dir(self) -> str:
        return str(Path(self.quality.reportDir or Path(self.lake.root, "_reports")).resolve())

    def source(self, name: str | None = None) -> SourceSettings:
        """The source called ``name``, or the only one when ``name`` is None."""
        if name is None:
            if len(self.sources) != 1:
                names = [s.name for s in self.sources]
                raise ConfigError(f"sources: give a source name, one of {names}")
            return self.sources[0]
        for s in self.sources:
            if s.name == name:
                return s
        raise ConfigError(f"sources: no source named {name!r} (have {[s.name for s in self.sources]})")


def merge(base: dict, over: dict) -> dict:
    """``over`` laid on ``base``: mappings merge key by key, other values replace, ``None`` removes.

    >>> merge({"spark": {"master": "local[2]", "conf": {"a": 1}}}, {"spark": {"conf": {"b": 2}}, "x": None})
    {'spark': {'master': 'local[2]', 'conf': {'a': 1, 'b': 2}}}
    """
    out = dict(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: settings file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a settings file") from None
    except PermissionError:
        raise ConfigError(f"{path}: not readable (permission denied)") from None
    return _parse_yaml(text, path)


def _parse_yaml(text: str, origin) -> dict:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{origin}: not valid YAML: {' '.join(str(e).split())}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections")
    return doc


def default_document() -> dict:
    """The embedded default settings (``msglake.conf``'s ``base/msglake.yaml``) as a mapping.

    Read as package data, not as a path: on a cluster executor msglake runs from a zip.
    """
    text = resources.files("msglake.conf").joinpath("base", "msglake.yaml").read_text()
    return _parse_yaml(text, DEFAULT_SETTINGS)


def _problems(error: ValidationError, doc: dict) -> list[str]:
    """Pydantic's errors as ``key: problem``; a source option of another format says so."""
    lines = []
    for line, err in zip(describe(error), error.errors()):
        loc = err["loc"]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found") and loc[:1] == ("sources",):
            tag = err.get("ctx", {}).get("tag")
            line = (f"{'.'.join(map(str, loc))}.format: {tag!r} is not a known format; use one of {list(CODECS)}"
                    if tag else f"{'.'.join(map(str, loc))}.format: required, one of {list(CODECS)}")
        elif len(loc) >= 3 and loc[0] == "sources" and loc[2] in CODECS:
            # A source entry's errors carry its format as a path step: leave it out of the key.
            rest = ".".join(str(p) for p in loc[3:])
            key = f"sources.{loc[1]}" + (f".{rest}" if rest else "")
            if err["type"] == "extra_forbidden":
                line = f"sources.{loc[1]}: {rest}: not an option of format {loc[2]!r}"
            else:
                line = key + line[line.index(":"):]
        lines.append(line)
    return lines


def from_dict(doc: dict, origin: str = "<settings>") -> Settings:
    """Validate a settings mapping; errors name every bad key with its path."""
    try:
        return Settings.model_validate(doc)
    except ValidationError as e:
        raise ConfigError(f"{origin}: invalid settings: " + "; ".join(_problems(e, doc))) from None


def checked_policies(doc, origin: str) -> dict[str, dict]:
    """A ``policies:`` mapping from outside the settings (a file, a request), validated as in a
    settings file, as the plain mappings the transforms take."""
    return policy_dicts(from_dict({"policies": doc}, origin).policies)


def load(path: str | os.PathLike | None = None, env: dict[str, str] | None = None) -> Settings:
    """The settings: the embedded default overlaid by ``conf/local``, ``path`` (or ``$MSGLAKE_CONF``)
    and the environment (see the module docstring).

    Examples
    --------
    >>> load(env={}).spark.master
    'local[2]'
    >>> load(env={"MSGLAKE_LAKE_ROOT": "/data/lake"}).lake.root
    '/data/lake'
    """
    env = os.environ if env is None else env
    doc, origins = default_document(), [str(DEFAULT_SETTINGS)]
    chosen = path or env.get("MSGLAKE_CONF")
    for layer in (LOCAL_CONF if LOCAL_CONF.is_file() else None, Path(chosen) if chosen else None):
        if layer is not None:
            doc = merge(doc, _read_yaml(layer))
            origins.append(str(layer))
    overrides = {"lake": {"root": env.get("MSGLAKE_LAKE_ROOT")},
                 "spark": {"master": env.get("MSGLAKE_SPARK_MASTER"), "jarsDir": env.get("MSGLAKE_JARS_DIR")}}
    for section, values in overrides.items():
        doc = merge(doc, {section: {k: v for k, v in values.items() if v}})
    return from_dict(doc, " + ".join(origins))
