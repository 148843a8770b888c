"""Typed, validated settings loaded from ``conf/`` YAML.

Every key is checked before any data is read: an unknown key or a wrong type fails with
the key's path, e.g. ``sources.0.storeHost: Input should be a valid string``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from formats.registry import CODECS, OPTION_NAMES, inapplicable

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONF = REPO_ROOT / "conf" / "base" / "msglake.yaml"
LOCAL_CONF = REPO_ROOT / "conf" / "local" / "msglake.yaml"

FORMATS = tuple(CODECS)


class SettingsError(ValueError):
    """Configuration that cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class LakeSettings(_Strict):
    root: str = "lake"

    def table_path(self, name: str) -> str:
        return str(Path(self.root, name).resolve())

    def checkpoint_path(self, name: str) -> str:
        return str(Path(self.root, "_checkpoints", name).resolve())


ConfValue = str | int | float | bool


class SparkSettings(_Strict):
    master: str = "local[2]"
    appName: str = "msglake"
    #: Folder holding the Delta jars; default ``<repo>/.jars`` (filled by ``make setup``).
    jarsDir: str | None = None
    conf: dict[str, ConfValue] = Field(default_factory=dict)


PositiveInt = Annotated[int, Field(gt=0)]


class SourceSettings(_Strict):
    """One broker data folder to ingest.

    ``path`` is an nsqd ``--data-path`` (``nsq-ext``) or a RocketMQ store root or its
    ``commitlog`` folder (``rocketmq-commitlog``). Format options: ``storeHost`` (nsq-ext:
    the broker address the segments do not record); ``delayLevels`` (the broker's
    ``messageDelayLevel``), ``decompress``, ``fileSize`` and ``verifyCrc`` (rocketmq-commitlog).
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    format: Literal[FORMATS]  # type: ignore[valid-type]
    path: str
    maxBytesPerTrigger: PositiveInt | None = None
    storeHost: str | None = None
    delayLevels: str | None = None
    decompress: bool | None = None
    fileSize: PositiveInt | None = None
    verifyCrc: bool | None = None

    @field_validator("storeHost")
    @classmethod
    def _host_port(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^\[?[0-9A-Za-z.:-]+\]?:\d{1,5}$", v):
            raise ValueError(f"expected host:port, got {v!r}")
        return v

    @field_validator("delayLevels")
    @classmethod
    def _levels(cls, v: str | None) -> str | None:
        if v is not None:
            from formats.rocketmq_layout import parse_delay_levels

            parse_delay_levels(v)
        return v

    @model_validator(mode="after")
    def _options_fit_the_format(self) -> "SourceSettings":
        wrong = inapplicable(self.format, self.options())
        if wrong:
            raise ValueError(f"{', '.join(wrong)}: not an option of format {self.format!r}")
        return self

    def options(self) -> dict:
        """The format options that are set, by their settings names."""
        return {k: getattr(self, k) for k in OPTION_NAMES if getattr(self, k) is not None}

    def codec_kwargs(self) -> dict:
        """The same options as codec keyword arguments."""
        return {OPTION_NAMES[k]: v for k, v in self.options().items()}


class IngestSettings(_Strict):
    # Measured on 4M NSQ messages, 2 cores: 256 MiB / 16 MiB gave 55K msg/s, 1 GiB / 64 MiB 87-93K
    # (fewer tasks, files and commits per message; memory stays bounded by the 8 MiB decode chunks).
    maxBytesPerTrigger: PositiveInt = 1 << 30
    splitBytes: PositiveInt = 64 << 20
    #: Mark producer retries arriving within this many seconds of the first copy (0: off).
    dedupWatermarkSeconds: Annotated[int, Field(ge=0)] = 600


NonNegativeInt = Annotated[int, Field(ge=0)]


class TopicPolicy(_Strict):
    """Delivery rules of the topics a pattern matches (shared/specs/semantics.md §1); all optional."""

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

    from quality.rules import LEVELS, RULES

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
        from quality.rules import RuleContext

        return RuleContext(policy_dicts(policies), self.maxMessageBytes, self.clockSkewMs)

    def levels(self) -> dict[str, str]:
        return self.rules.model_dump()


class Settings(_Strict):
    lake: LakeSettings = Field(default_factory=LakeSettings)
    #: Topic name or glob pattern -> its policy; the most specific match wins (exact names first,
    #: then the pattern with the most literal characters).
    policies: dict[str, TopicPolicy] = Field(default_factory=dict)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    sources: list[SourceSettings] = Field(default_factory=list)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)

    def report_dir(self) -> str:
        return str(Path(self.quality.reportDir or Path(self.lake.root, "_reports")).resolve())

    def source(self, name: str | None = None) -> SourceSettings:
        """The source called ``name``, or the only one when ``name`` is None."""
        if name is None:
            if len(self.sources) != 1:
                names = [s.name for s in self.sources]
                raise SettingsError(f"sources: give a source name, one of {names}")
            return self.sources[0]
        for s in self.sources:
            if s.name == name:
                return s
        raise SettingsError(f"sources: no source named {name!r} (have {[s.name for s in self.sources]})")


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _read_yaml(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"{path}: settings file not found") from None
    except yaml.YAMLError as e:
        raise SettingsError(f"{path}: not valid YAML: {e}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise SettingsError(f"{path}: the top level must be a mapping of sections")
    return doc


def from_dict(doc: dict, origin: str = "<settings>") -> Settings:
    """Validate a settings mapping; errors name every bad key with its path."""
    try:
        return Settings.model_validate(doc)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            elif "input" in err and not isinstance(err["input"], (dict, list)):
                msg += f" (got {err['input']!r})"
            problems.append(f"{key}: {msg}")
        raise SettingsError(f"{origin}: invalid settings\n  " + "\n  ".join(problems)) from None


def load(path: str | os.PathLike | None = None, env: dict[str, str] | None = None) -> Settings:
    """Load settings: ``path`` (or ``$MSGLAKE_CONF``, or ``conf/base`` + ``conf/local``), then env overrides.

    Examples
    --------
    >>> load().lake.root
    'lake'
    """
    env = os.environ if env is None else env
    chosen = path or env.get("MSGLAKE_CONF")
    if chosen:
        origin = str(chosen)
        doc = _read_yaml(Path(chosen))
    else:
        origin = str(DEFAULT_CONF)
        doc = _read_yaml(DEFAULT_CONF)
        if LOCAL_CONF.exists():
            doc = _merge(doc, _read_yaml(LOCAL_CONF))
            origin += f" + {LOCAL_CONF}"
    if env.get("MSGLAKE_LAKE_ROOT"):
        doc = _merge(doc, {"lake": {"root": env["MSGLAKE_LAKE_ROOT"]}})
    if env.get("MSGLAKE_SPARK_MASTER"):
        doc = _merge(doc, {"spark": {"master": env["MSGLAKE_SPARK_MASTER"]}})
    return from_dict(doc, origin)
