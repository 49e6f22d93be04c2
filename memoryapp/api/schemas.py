"""Request and response bodies of the agent API."""

import uuid
from datetime import datetime
from typing import Literal

from ninja import Field, Schema

from memoryapp.recall import MESSAGE_MAX_CHARS
from memoryapp.sessions import EXTERNAL_ID_PATTERN

# What counts as blank, spelt out so the schema (ECMAScript regex) and the server (Python) agree:
# Python's str.isspace() and ECMAScript's \s differ (\x1c-\x1f, \x85, \ufeff). The zero-width characters
# show nothing either, so a turn of them alone is as empty as one of spaces.
BLANK = r"\t\n\x0b\x0c\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff"
NOT_BLANK = rf"^[^\u0000]*[^\u0000{BLANK}][^\u0000]*$"

ExternalUser = Field(..., min_length=1, max_length=128, pattern=EXTERNAL_ID_PATTERN)


class BodyIn(Schema):
    """A request body: a field it does not know is a 422, never ignored ({"Memory": "off"} must not leave memory on)."""

    model_config = {"extra": "forbid"}


class SessionIn(BodyIn):
    model_config = {"json_schema_extra": {"examples": [{"user": "alice", "memory": "on"}]}}

    user: str = ExternalUser
    memory: Literal["on", "off"] = "on"


class SessionOut(Schema):
    id: uuid.UUID
    user: str
    memory: Literal["on", "off"]
    started_at: datetime


class TurnIn(BodyIn):
    model_config = {
        "json_schema_extra": {
            "examples": [{"role": "user", "content": "We are on-prem by contract; never propose cloud services."}]
        }
    }

    role: Literal["user", "assistant", "tool"]
    # Enforced by _clean_content (for its clearer errors); declared here so the spec says so too.
    content: str = Field(
        ...,
        description="Not blank, no NUL characters, at most MEMORY_MAX_TURN_BYTES of UTF-8 (32 KiB by default).",
        json_schema_extra={"pattern": NOT_BLANK},
    )


class TurnsIn(BodyIn):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "turns": [
                        {"role": "user", "content": "How should we store the uploads of the new module?"},
                        {"role": "assistant", "content": "On your own servers: an on-prem object store such as MinIO."},
                    ]
                }
            ]
        }
    }

    turns: list[TurnIn] = Field(
        ..., description="1 to MEMORY_MAX_TURNS_PER_CALL turns (100 by default).", json_schema_extra={"minItems": 1}
    )


class AcceptedOut(Schema):
    accepted: int
    replayed: bool = Field(False, description="A retry of a recent batch under its Idempotency-Key: stored once.")


class QueuedOut(Schema):
    status: str


class SessionStatusOut(Schema):
    id: uuid.UUID
    user: str
    memory: Literal["on", "off"]
    started_at: datetime
    last_activity_at: datetime
    ended: bool
    ended_at: datetime | None
    end_reason: str | None
    extraction_status: Literal["pending", "queued", "running", "done", "failed", "skipped"] = Field(
        ...,
        description="done and skipped (memory off) are final; failed is retried until its attempts run out",
    )
    turns: int
    facts_written: list[uuid.UUID]
    facts_confirmed: list[uuid.UUID]
    facts_superseded: list[uuid.UUID]
    facts_pending: list[uuid.UUID] = Field(
        ..., description="Candidates from this session waiting for the person's word (GET /users/{user}/pending)"
    )


class RecallIn(BodyIn):
    model_config = {
        "json_schema_extra": {
            "examples": [{"session": "3f2b8c1e-9d4a-4c7b-8e2f-1a6d5b9c0e47", "message": "Where should the uploads go?"}]
        }
    }

    session: uuid.UUID
    message: str = Field("", max_length=MESSAGE_MAX_CHARS)
    refresh: bool = Field(False, strict=True)


class RecalledFact(Schema):
    id: uuid.UUID
    text: str
    kind: str
    scope: str
    tier: str
    score: float | None


class RecallOut(Schema):
    block: str
    facts: list[RecalledFact]
    cached: bool


class PromptIn(BodyIn):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "session": "3f2b8c1e-9d4a-4c7b-8e2f-1a6d5b9c0e47",
                    "message": "Where should the uploads go?",
                    "instructions": "You are a helpful, concise engineering assistant.",
                    "tool_guidance": "You have no tools; say what you would look up instead.",
                }
            ]
        }
    }

    session: uuid.UUID
    message: str = Field("", max_length=MESSAGE_MAX_CHARS)
    instructions: str = Field("", max_length=200_000)
    tool_guidance: str = Field("", max_length=200_000)
    refresh: bool = Field(False, strict=True)


class CacheControl(Schema):
    type: Literal["ephemeral"]


class SystemBlock(Schema):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None  # only on the last stable block


class PromptOut(Schema):
    system: list[SystemBlock]


class InjectedOut(Schema):
    fact: uuid.UUID
    text: str
    kind: str
    scope: str
    tier: str
    score: float | None
    recalled_at: datetime
    in_current_block: bool  # False for what an earlier block held before a refresh


class SessionRecallOut(Schema):
    session: uuid.UUID
    memory: Literal["on", "off"]
    block: str | None
    block_at: datetime | None
    injected: list[InjectedOut]
