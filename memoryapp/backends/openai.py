"""The one module that talks to OpenAI-compatible servers: OpenAI, Ollama, vLLM, llama.cpp, LM Studio.

Same prompts and the same answer validation as the Anthropic backend (the answer goes through
`extraction.parse_answer` / `parse_verdicts`). Tests replace the HTTP client at this edge
(`settings.OPENAI_HTTP_CLIENT`).
"""

import functools
import logging
import re
import threading
import time

from django.conf import settings

from memoryapp.backends.base import (
    EXTRACT_SYSTEM,
    VERDICT_SYSTEM,
    VERDICTS,
    Answer,
    ModelUnavailable,
    Usage,
    budgeted,
    parse_verdicts,
)
from memoryapp.vocabulary import KINDS

log = logging.getLogger(__name__)

EXTRACT_SCHEMA = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "maxLength": 200},
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "scope": {"type": "string", "enum": ["personal", "org"]},
                },
                "required": ["text", "kind", "scope"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"verdicts": {"type": "array", "items": {"type": "string", "enum": list(VERDICTS)}}},
    "required": ["verdicts"],
    "additionalProperties": False,
}

# How the answer is constrained, strongest first. A server that refuses one (a 400 naming
# response_format or the schema) is asked again with the next, and remembered for the process.
MODES = ("json_schema", "json_object", "prompt")
_REFUSAL = re.compile(r"response_format|json_schema|json_object|structured|schema|grammar", re.IGNORECASE)
_fallbacks = {}  # (base_url, model) -> index into MODES of the strongest mode the server accepted
_fallbacks_lock = threading.Lock()  # only guards the dict; never held across a call


@functools.lru_cache(maxsize=4)
def _client(base_url, api_key, timeout, max_retries, http_client):
    import openai  # here, not at the top: the SDK's import costs a second in every process, most never call it

    return openai.OpenAI(
        base_url=base_url,
        # Local servers ignore the key but the SDK insists on one.
        api_key=api_key or "not-needed",
        timeout=timeout,
        # The SDK retries 408/409/429/5xx and timeouts with exponential backoff.
        max_retries=max_retries,
        http_client=http_client,
    )


def client():
    """The OpenAI client for the current settings (kept, so connections are reused)."""
    return budgeted(
        _client(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_API_KEY,
            settings.OPENAI_TIMEOUT,
            settings.OPENAI_MAX_RETRIES,
            settings.OPENAI_HTTP_CLIENT,
        )
    )


def forget_fallbacks():
    """Forget which servers refused structured output (a server upgrade, or between tests)."""
    with _fallbacks_lock:
        _fallbacks.clear()


def _response_format(mode, name, schema):
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if mode == "json_object":
        return {"type": "json_object"}
    import openai  # here, not at the top: see _client

    return openai.omit


def _refused_format(exc):
    """A 400/422 about response_format: the server does not do this kind of structured output."""
    status = getattr(exc, "status_code", None)
    return status in (400, 422) and bool(_REFUSAL.search(str(exc)))


def unfence(text):
    """The JSON inside a ```json fence some local models wrap their answer in."""
    m = re.match(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", text or "", re.DOTALL)
    return m.group(1) if m else (text or "")


def complete(system, user_content, name, schema, max_tokens=1024):
    """One chat completion in the strongest JSON mode the server accepts; text answer and usage."""
    import openai  # here, not at the top: see _client

    key = (settings.OPENAI_BASE_URL, settings.OPENAI_MODEL)
    with _fallbacks_lock:
        start = _fallbacks.get(key, 0)
    started = time.monotonic()
    for index in range(start, len(MODES)):
        mode = MODES[index]
        try:
            response = client().chat.completions.create(
                model=settings.OPENAI_MODEL,
                max_tokens=max_tokens,
                temperature=0,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user_content}],
                response_format=_response_format(mode, name, schema),
            )
        except openai.APIStatusError as exc:
            if index + 1 < len(MODES) and _refused_format(exc):
                log.warning("%s refused response_format %s (%s); falling back", key, mode, exc)
                with _fallbacks_lock:
                    _fallbacks[key] = max(_fallbacks.get(key, 0), index + 1)
                continue
            raise ModelUnavailable(f"{type(exc).__name__} after {time.monotonic() - started:.1f}s: {exc}") from exc
        except openai.APIError as exc:
            raise ModelUnavailable(f"{type(exc).__name__} after {time.monotonic() - started:.1f}s: {exc}") from exc
        return _answer(response)
    raise ModelUnavailable("no response_format mode was accepted")  # unreachable: "prompt" sends none


def _answer(response):
    choice = response.choices[0] if response.choices else None
    text = (choice.message.content or "") if choice is not None else ""
    u = response.usage
    cached = 0
    if u is not None and getattr(u, "prompt_tokens_details", None) is not None:
        cached = u.prompt_tokens_details.cached_tokens or 0
    prompt = (u.prompt_tokens or 0) if u is not None else 0
    usage = Usage(
        input_tokens=max(0, prompt - cached),  # OpenAI counts cached tokens inside prompt_tokens
        output_tokens=(u.completion_tokens or 0) if u is not None else 0,
        cache_read_tokens=cached,
        calls=1,
        prices=dict(settings.OPENAI_PRICE_PER_MTOK),
    )
    return Answer(text=unfence(text), usage=usage, model=response.model or settings.OPENAI_MODEL)


class OpenAIBackend:
    name = "openai"

    @property
    def model(self):
        return settings.OPENAI_MODEL

    def extract(self, text):
        return complete(
            EXTRACT_SYSTEM,
            "Here is what the person typed in this conversation:\n\n" + text,
            "facts",
            EXTRACT_SCHEMA,
        )

    def verdicts(self, new_text, old_texts):
        listing = "\n".join(f"{i + 1}. {t}" for i, t in enumerate(old_texts))
        answer = complete(
            VERDICT_SYSTEM, f"NEW fact: {new_text}\n\nEXISTING facts:\n{listing}", "verdicts", VERDICT_SCHEMA, 256
        )
        return parse_verdicts(answer.text, len(old_texts)), answer.usage
