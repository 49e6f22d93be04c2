"""Issue 42 part 2: no web request waits on a model for more than MODEL_REQUEST_SECONDS.

The Anthropic SDK talks to a real loopback server that hangs (or fails), as a provider would; the
agent's "remember this" answers within the budget, judged by the offline judge and labelled so,
or with MODEL_STRICT a 503 `model_unavailable`. Before, it waited 94 s (4 attempts × 30 s) or gave a 500.
"""

import json
import time

import pytest
from django.test import Client

from memoryapp import backends, sessions, writing
from memoryapp.backends import anthropic as anthropic_backend
from memoryapp.models import FactEvent, MemoryFact
from tests.test_faults import fake_model  # noqa: F401 (the loopback provider fixture)

pytestmark = pytest.mark.django_db(transaction=True)

OLD = "The user's code editor is Vim."
NEW = "The user's code editor is Emacs."


@pytest.fixture
def hung_provider(fake_model, settings, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_model.url)
    anthropic_backend._client.cache_clear()
    settings.EXTRACTION_BACKEND = "anthropic"
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    settings.ANTHROPIC_TIMEOUT, settings.ANTHROPIC_MAX_RETRIES = 30.0, 3
    settings.MODEL_REQUEST_SECONDS = 0.5
    fake_model.hold.set()  # the next call hangs until released
    yield fake_model
    fake_model.release.set()
    anthropic_backend._client.cache_clear()


def remember(api_key, text):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    started = time.monotonic()
    r = client.post("/api/v1/users/alice/facts", json.dumps({"text": text, "kind": "profile"}), "application/json")
    return r, time.monotonic() - started


def test_a_hung_provider_costs_one_bounded_attempt_then_the_offline_judge_answers(org, api_key, hung_provider):
    writing.store(sessions.get_or_create_user(org, "alice"), OLD, "profile", judge=backends.ScriptedBackend().verdicts)
    r, elapsed = remember(api_key, NEW)
    assert r.status_code == 201, r.content
    assert elapsed < 10, f"waited {elapsed:.1f} s on a hung provider"
    assert len(hung_provider.calls) == 1, "one attempt: the SDK's own retries are off on the web path"
    created = FactEvent.objects.get(fact_id=r.json()["fact"]["id"], action="created")
    assert "offline judge" in created.reason, "provenance says who gave the verdicts"
    assert MemoryFact.objects.live().filter(text=NEW).exists()


def test_strict_mode_answers_503_model_unavailable_and_stores_nothing(org, api_key, hung_provider, settings):
    settings.MODEL_STRICT = True
    writing.store(sessions.get_or_create_user(org, "alice"), OLD, "profile", judge=backends.ScriptedBackend().verdicts)
    r, _ = remember(api_key, NEW)
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_unavailable"
    assert r["Retry-After"].isdigit()
    assert list(MemoryFact.objects.values_list("text", flat=True)) == [OLD]


def test_outside_a_request_the_sdk_keeps_its_own_timeout_and_retries(hung_provider):
    client = anthropic_backend.client()
    assert client.max_retries == 3 and client.timeout == 30.0
    with backends.bounded(0.5):
        limited = anthropic_backend.client()
    assert limited.max_retries == 0 and limited.timeout == 0.5


def test_a_write_judged_again_does_not_wait_on_a_failed_model_twice(monkeypatch, settings):
    # A write judges again when its neighbours changed meanwhile; after the model failed once in this
    # request, the next judgement goes straight to the offline judge (the drill provider-hung measured
    # 15.8 s, three bounded attempts, before this).
    settings.MODEL_STRICT = False
    tried, labels = [], []

    class Down(backends.ScriptedBackend):
        name = "anthropic"

        def verdicts(self, new_text, old_texts):
            tried.append(new_text)
            raise backends.ModelUnavailable("timed out")

    monkeypatch.setattr(backends, "active_backend", Down)
    judge = backends.request_verdicts(labels.append)
    for _ in range(writing.JUDGE_ATTEMPTS):
        verdicts, _usage = judge(NEW, [OLD])
        assert len(verdicts) == 1
    assert tried == [NEW], "one model attempt per request"
    assert labels == ["anthropic"], "labelled once"
