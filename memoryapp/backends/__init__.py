"""The model backends behind one interface, and the one place that chooses between them.

A backend has a `name`, a `model`, `extract(text) -> Answer` (JSON text with a "facts" list) and
`verdicts(new_text, old_texts) -> ([verdict, ...], Usage)`.
"""

from django.conf import settings

from memoryapp.backends.anthropic import AnthropicBackend
from memoryapp.backends.base import Answer, ModelUnavailable, Usage
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
