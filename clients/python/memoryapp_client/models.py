"""Typed answers of the agent API. Each mirrors one schema of /api/openapi.json (named in `api_schema`);
the server's test suite checks that the fields match, so a change on either side fails there."""

import uuid
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["preference", "constraint", "profile", "goal"]


class Model(BaseModel):
    # A newer server may add fields: ignore them rather than fail.
    model_config = ConfigDict(extra="ignore", frozen=True)
    api_schema: ClassVar[str]  # the OpenAPI schema this model mirrors


class Provenance(Model):
    api_schema = "ProvenanceOut"
    origin: str
    source_session: uuid.UUID | None = None
    source_turns: list[int] = []
    extraction_run: int | None = None
    backend: str | None = None
    created_at: datetime
    last_confirmed_at: datetime
    confirmation_count: int


class Fact(Model):
    api_schema = "FactOut"
    id: uuid.UUID
    text: str
    kind: str
    state: Literal["live", "superseded", "expired"]
    created_at: datetime
    last_recalled_at: datetime | None = None
    superseded_at: datetime | None = None
    superseded_by: uuid.UUID | None = None
    supersede_reason: str | None = None
    expired_at: datetime | None = None
    expired_rule: str | None = None
    provenance: Provenance


class FactPage(Model):
    api_schema = "FactPageOut"
    facts: list[Fact]
    next_cursor: str | None = None


class FactEvent(Model):
    api_schema = "EventOut"
    action: str
    actor: str
    reason: str
    session: uuid.UUID | None = None
    related_fact: uuid.UUID | None = None
    created_at: datetime


class FactRecall(Model):
    api_schema = "RecalledInOut"
    session: uuid.UUID
    tier: str
    score: float | None = None
    recalled_at: datetime


class FactDetail(Fact):
    api_schema = "FactDetailOut"
    chain: list[Fact]
    events: list[FactEvent]
    recalls: list[FactRecall]
    recall_count: int


class Pending(Model):
    api_schema = "PendingOut"
    id: uuid.UUID
    text: str
    kind: str
    reason: str


class PendingPage(Model):
    api_schema = "PendingPageOut"
    pending: list[Pending]
    next_cursor: str | None = None


class Remembered(Model):
    api_schema = "RememberOut"
    outcome: Literal["created", "confirmed", "superseded", "held", "pending"]
    fact: Fact | None = None  # None when pending, or confirmed or held for a key without `read`
    superseded: list[uuid.UUID] = []
    pending: Pending | None = None


class Corrected(Model):
    api_schema = "CorrectedOut"
    changed: bool
    fact: Fact | None  # None in a pending answer to a key without `read`
    replaced: uuid.UUID | None = None
    pending: Pending | None = None


class Deleted(Model):
    api_schema = "DeletedOut"
    deleted: int


class Session(Model):
    api_schema = "SessionOut"
    id: uuid.UUID
    user: str
    memory: Literal["on", "off"]
    started_at: datetime


class SessionStatus(Model):
    api_schema = "SessionStatusOut"
    id: uuid.UUID
    user: str
    memory: Literal["on", "off"]
    started_at: datetime
    last_activity_at: datetime
    ended: bool
    ended_at: datetime | None = None
    end_reason: str | None = None
    extraction_status: str
    turns: int
    facts_written: list[uuid.UUID]
    facts_confirmed: list[uuid.UUID]
    facts_superseded: list[uuid.UUID]
    facts_pending: list[uuid.UUID] = []  # waiting for the person's word


class Accepted(Model):
    api_schema = "AcceptedOut"
    accepted: int
    replayed: bool = False


class Queued(Model):
    api_schema = "QueuedOut"
    status: str


class RecalledFact(Model):
    api_schema = "RecalledFact"
    id: uuid.UUID
    text: str
    kind: str
    scope: str
    tier: str
    score: float | None = None


class Recall(Model):
    api_schema = "RecallOut"
    block: str
    facts: list[RecalledFact]
    cached: bool


class CacheControl(Model):
    api_schema = "CacheControl"
    type: Literal["ephemeral"]


class SystemBlock(Model):
    api_schema = "SystemBlock"
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None

    def to_anthropic(self):
        """The block as the Anthropic Messages API takes it (no cache_control key when there is none)."""
        return self.model_dump(exclude_none=True)


class Prompt(Model):
    api_schema = "PromptOut"
    system: list[SystemBlock]


class Injected(Model):
    api_schema = "InjectedOut"
    fact: uuid.UUID
    text: str
    kind: str
    scope: str
    tier: str
    score: float | None = None
    recalled_at: datetime
    in_current_block: bool


class SessionRecall(Model):
    api_schema = "SessionRecallOut"
    session: uuid.UUID
    memory: Literal["on", "off"]
    block: str | None = None
    block_at: datetime | None = None
    injected: list[Injected]


class PortalLink(Model):
    api_schema = "PortalOut"
    url: str
    expires_at: datetime


class Receipt(Model):
    api_schema = "ReceiptOut"
    receipt: uuid.UUID
    created_at: datetime
    requested_via: str
    subject_ref: str
    counts: dict[str, int]
    identities: list[str] = []  # the organisations whose ids for the person were erased too


class ErrorBody(Model):
    api_schema = "ErrorBody"
    code: str
    message: str
    field: str | None = None


ALL = [
    Provenance, Fact, FactPage, Pending, PendingPage, FactEvent, FactRecall, FactDetail, Remembered, Corrected,
    Deleted, Session, SessionStatus, Accepted, Queued, RecalledFact, Recall, CacheControl, SystemBlock, Prompt,
    Injected, SessionRecall, PortalLink, Receipt, ErrorBody,
]  # fmt: skip
