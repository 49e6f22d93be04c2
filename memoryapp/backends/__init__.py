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


def active_backend():
    """The backend in force: settings.EXTRACTION_BACKEND, else Anthropic with a key, else offline.

    The setting is a name, or a backend instance (tests and the scenario harness set one through
    `override_settings`).
    """
    choice = settings.EXTRACTION_BACKEND or ("anthropic" if settings.ANTHROPIC_API_KEY else "offline")
    if not isinstance(choice, str):
        return choice
    return BACKENDS[choice]()
