"""The one module that talks to Anthropic. Tests replace the HTTP client at this edge."""

import functools
import time

from django.conf import settings

from memoryapp.backends.base import (
    EXTRACT_SYSTEM,
    VERDICT_SYSTEM,
    Answer,
    ModelUnavailable,
    Usage,
    budgeted,
    parse_verdicts,
)


@functools.lru_cache(maxsize=4)
def _client(api_key, timeout, max_retries, http_client):
    import anthropic  # here, not at the top: the SDK's import costs seconds in every process, most never call it

    return anthropic.Anthropic(
        api_key=api_key or "missing-key",
        timeout=timeout,
        # The SDK retries 408/409/429/5xx/529 and timeouts with exponential backoff.
        max_retries=max_retries,
        http_client=http_client,
    )


def client():
    """The Anthropic client for the current settings (kept, so connections are reused).

    `ANTHROPIC_HTTP_CLIENT` is None in production; tests set an httpx2 client on a MockTransport.
    """
    return budgeted(
        _client(
            settings.ANTHROPIC_API_KEY,
            settings.ANTHROPIC_TIMEOUT,
            settings.ANTHROPIC_MAX_RETRIES,
            settings.ANTHROPIC_HTTP_CLIENT,
        )
    )


def complete(system, user_content, max_tokens=1024):
    """One call with a cached system prompt; returns the text answer and token usage."""
    import anthropic  # here, not at the top: see _client

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


class AnthropicBackend:
    name = "anthropic"

    @property
    def model(self):
        return settings.ANTHROPIC_MODEL

    def extract(self, text):
        return complete(
            EXTRACT_SYSTEM,
            "Here is what the person typed in this conversation:\n\n" + text,
        )

    def verdicts(self, new_text, old_texts):
        listing = "\n".join(f"{i + 1}. {t}" for i, t in enumerate(old_texts))
        answer = complete(VERDICT_SYSTEM, f"NEW fact: {new_text}\n\nEXISTING facts:\n{listing}", 256)
        return parse_verdicts(answer.text, len(old_texts)), answer.usage
