"""The one module that talks to Anthropic. Tests replace the HTTP client at this edge."""

import time
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings

# Claude Haiku 4.5, USD per million tokens.
PRICE_PER_MTOK = {
    "input": Decimal("1.00"),
    "output": Decimal("5.00"),
    "cache_write": Decimal("1.25"),
    "cache_read": Decimal("0.10"),
}

_client = None
_http_client = None  # set by tests: an httpx2.Client on a MockTransport


class ModelUnavailable(RuntimeError):
    """The model could not be reached or kept failing after bounded retries."""


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0

    def add(self, other):
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.calls += other.calls

    @property
    def cost_usd(self):
        million = Decimal(1_000_000)
        return (
            self.input_tokens * PRICE_PER_MTOK["input"]
            + self.output_tokens * PRICE_PER_MTOK["output"]
            + self.cache_write_tokens * PRICE_PER_MTOK["cache_write"]
            + self.cache_read_tokens * PRICE_PER_MTOK["cache_read"]
        ) / million


@dataclass
class Answer:
    text: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""


def use_http_client(http_client):
    """Route every later call through `http_client` (tests pass a MockTransport client)."""
    global _client, _http_client
    _http_client = http_client
    _client = None


def client():
    """The process's Anthropic client, created on first use."""
    global _client
    if _client is None:
        import anthropic

        _client = anthropic.Anthropic(
            api_key=settings.ANTHROPIC_API_KEY or "missing-key",
            timeout=settings.ANTHROPIC_TIMEOUT,
            # The SDK retries 408/409/429/5xx/529 and timeouts with exponential backoff.
            max_retries=settings.ANTHROPIC_MAX_RETRIES,
            http_client=_http_client,
        )
    return _client


def complete(system, user_content, max_tokens=1024):
    """One call with a cached system prompt; returns the text answer and token usage."""
    import anthropic

    started = time.monotonic()
    try:
        message = client().messages.create(
            model=settings.ANTHROPIC_MODEL,
            max_tokens=max_tokens,
            system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": user_content}],
        )
    except anthropic.APIError as exc:
        elapsed = time.monotonic() - started
        raise ModelUnavailable(f"{type(exc).__name__} after {elapsed:.1f}s: {exc}") from exc
    text = "".join(block.text for block in message.content if getattr(block, "type", "") == "text")
    u = message.usage
    usage = Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_tokens=getattr(u, "cache_read_input_tokens", 0) or 0,
        cache_write_tokens=getattr(u, "cache_creation_input_tokens", 0) or 0,
        calls=1,
    )
    return Answer(text=text, usage=usage, model=message.model)
