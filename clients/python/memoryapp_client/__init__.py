"""Python client for the memoryapp agent API: `MemoryClient` (sync) and `AsyncMemoryClient` (async)."""

from memoryapp_client.client import AsyncMemoryClient, MemoryClient
from memoryapp_client.errors import MemoryappError
from memoryapp_client.models import (
    Corrected,
    Deleted,
    Fact,
    FactDetail,
    FactPage,
    Recall,
    Remembered,
    Session,
    SessionStatus,
    SystemBlock,
)

__all__ = [
    "AsyncMemoryClient",
    "Corrected",
    "Deleted",
    "Fact",
    "FactDetail",
    "FactPage",
    "MemoryClient",
    "MemoryappError",
    "Recall",
    "Remembered",
    "Session",
    "SessionStatus",
    "SystemBlock",
]
