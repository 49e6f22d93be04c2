"""The model backends behind one interface, and the one place that chooses between them.

A backend has a `name`, a `model`, `extract(text) -> Answer` (JSON text with a "facts" list) and
`verdicts(new_text, old_texts) -> ([verdict, ...], Usage)`.
"""

from django.conf import settings

from memoryapp.backends.anthropic import AnthropicBackend
from memoryapp.backends.base import Answer, ModelUnavailable, Usage, bounded
from memoryapp.backends.offline import OfflineBackend
from memoryapp.backends.openai import OpenAIBackend
from memoryapp.backends.scripted import ScriptedBackend

__all__ = [
    "Answer",
    "ModelUnavailable",
    "Usage",
    "AnthropicBackend",
    "OfflineBackend",
    "OpenAIBackend",
    "ScriptedBackend",
]

BACKENDS = {"anthropic": AnthropicBackend, "offline": OfflineBackend, "openai": OpenAIBackend}


def configured(name):
    """True when backend `name` can be called here: Anthropic needs a key, OpenAI-compatible a server or a key."""
    if name == "anthropic":
        return bool(settings.ANTHROPIC_API_KEY)
    if name == "openai":
        return bool(settings.OPENAI_BASE_URL or settings.OPENAI_API_KEY)
    return True


def active_backend():
    """The backend in force: settings.EXTRACTION_BACKEND, else Anthropic with a key, else offline.

    The setting is a name, or a backend instance (tests and the scenario harness set one through
    `override_settings`).
    """
    choice = settings.EXTRACTION_BACKEND or ("anthropic" if configured("anthropic") else "offline")
    if not isinstance(choice, str):
        return choice
    return BACKENDS[choice]()


def request_verdicts(on_fallback):
    """Verdicts for a web request: one model attempt of at most MODEL_REQUEST_SECONDS.

    When the model times out or is down, the offline judge answers instead and `on_fallback(name)`
    is told (the caller labels the write in provenance) — unless MODEL_STRICT, when
    ModelUnavailable reaches the caller (a 503 with Retry-After).
    """

    # Why remember the failure: a write judges again when its neighbours changed meanwhile (up to
    # writing.JUDGE_ATTEMPTS times); after one failed attempt the request must not wait on the model
    # again, or a hung provider costs a person JUDGE_ATTEMPTS x MODEL_REQUEST_SECONDS (drill provider-hung).
    failed = []

    def judge(new_text, old_texts):
        backend = active_backend()
        try:
            if failed:
                raise ModelUnavailable(f"{backend.name} already failed in this request")
            with bounded(settings.MODEL_REQUEST_SECONDS):
                return backend.verdicts(new_text, old_texts)
        except ModelUnavailable:
            if settings.MODEL_STRICT:
                raise
            if not failed:  # the write is labelled once
                on_fallback(backend.name)
            failed.append(backend.name)
            return OfflineBackend().verdicts(new_text, old_texts)

    return judge


def call_timeout(backend):
    """One model call's timeout for `backend` (None for a backend that calls no provider)."""
    return {"anthropic": settings.ANTHROPIC_TIMEOUT, "openai": settings.OPENAI_TIMEOUT}.get(backend.name)
