"""Ground truth of generated sample data: what a decoder must find, for every format."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Expected:
    """One message a generator wrote."""

    topic: str
    partition: int
    segment: str
    position: int
    virtual_offset: int  # the queue offset
    message_id: str
    body: bytes
    trace_id: str | None
    tags: str | None
    priority: int
    #: (partition, segment, position) of the first copy, for a producer retry.
    retry_of: tuple | None = None
    unique_id: str | None = None
    #: The message's own UNIQ_KEY (RocketMQ; differs from ``unique_id`` for a batch send's members).
    producer_unique_id: str | None = None


@dataclass
class ExpectedQuarantine:
    segment: str
    position: int
    length: int
    reason: str  # a fragment of the reason the decoder must give


@dataclass
class GroundTruth:
    messages: list[Expected] = field(default_factory=list)
    quarantined: list[ExpectedQuarantine] = field(default_factory=list)
    pending_bytes: int = 0
    #: Bytes that hold no record by design (RocketMQ end-of-file blanks and unwritten tails).
    padding_bytes: int = 0
    #: Records that decode but that a quality rule at its default level moves to quarantine at
    #: ingest (the codec itself returns them as messages).
    held: list[ExpectedQuarantine] = field(default_factory=list)
    #: Messages that decode but break a warn-level quality rule (quality/rules.py) by default: rule -> count.
    warned: dict[str, int] = field(default_factory=dict)

    def warn(self, rule: str) -> None:
        self.warned[rule] = self.warned.get(rule, 0) + 1

    def ingest_quarantine(self) -> list[ExpectedQuarantine]:
        """What an ingest with the default quality rules puts in ``quarantine``."""
        return self.quarantined + self.held

    def by_key(self) -> dict[tuple, Expected]:
        return {(m.topic, m.partition, m.segment, m.position): m for m in self.messages}
