"""examples/agent.py run the way a developer runs it, against a live server, over HTTP only."""

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx2
import pytest

from memoryapp import embeddings, sessions
from memoryapp.models import AgentSession, MemoryFact, Turn
from tests.conftest import anthropic_reply

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = Path(__file__).resolve().parent.parent / "examples" / "agent.py"
ONPREM = "The user's company is on-prem by contract and cannot use cloud services."


def _load_agent():
    spec = importlib.util.spec_from_file_location("example_agent", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remember(org, external_id, text):
    user = sessions.get_or_create_user(org, external_id)
    MemoryFact.objects.create(
        user=user,
        text=text,
        kind="constraint",
        embedding=embeddings.embed(text),
        embedding_model=embeddings.model_name(),
    )
    return user


def _run(live_server, api_key, *args, stdin=None):
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    # As after `pip install ./clients/python`: the example imports the memoryapp client.
    client = str(AGENT.parent.parent / "clients" / "python")
    env.update(MEMORYAPP_URL=live_server.url, MEMORYAPP_API_KEY=api_key)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (client, env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, str(AGENT), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )


def test_without_a_model_key_it_prints_the_assembled_prompt_and_records_the_session(live_server, org, api_key):
    alice = _remember(org, "alice", ONPREM)

    done = _run(
        live_server,
        api_key,
        "--user",
        "alice",
        "-m",
        "How should we handle file storage for the new module?",
        "-m",
        "And backups?",
    )

    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("--- system prompt") == 2
    assert "(cache breakpoint)" in out and "(memory)" in out and "on-prem" in out
    assert out.index("(cache breakpoint)") < out.index("(memory)")
    assert "session ended; memory extraction queued" in out
    session = AgentSession.objects.get(user=alice)
    assert session.ended_at is not None and session.end_reason == "explicit"
    assert list(Turn.objects.filter(session=session).values_list("role", "content")) == [
        ("user", "How should we handle file storage for the new module?"),
        ("user", "And backups?"),
    ]
    assert "on-prem" in session.memory_block


def test_it_chats_from_standard_input_until_an_empty_line(live_server, org, api_key):
    done = _run(live_server, api_key, "--user", "bob", stdin="What is a mutex?\n\nnot sent\n")
    assert done.returncode == 0, done.stderr
    session = AgentSession.objects.get()
    assert list(Turn.objects.filter(session=session).values_list("content", flat=True)) == ["What is a mutex?"]
    assert session.ended_at is not None


def test_a_bad_key_is_a_clear_error_not_a_traceback(live_server, org):
    done = _run(live_server, "mem_wrong", "--user", "alice", "-m", "hi")
    assert done.returncode == 1
    assert "401" in done.stderr and "API key" in done.stderr and "Traceback" not in done.stderr


def test_with_claude_it_sends_the_assembled_prompt_and_records_both_turns(live_server, org, api_key):
    alice = _remember(org, "alice", ONPREM)
    sent = []

    def fake_claude(request):
        sent.append(json.loads(request.content))
        return httpx2.Response(
            200,
            json=anthropic_reply(
                "Use your on-prem object store, for example MinIO.",
                input_tokens=50,
                output_tokens=12,
                cache_read_input_tokens=40,
            ),
        )

    client = anthropic.Anthropic(api_key="x", http_client=httpx2.Client(transport=httpx2.MockTransport(fake_claude)))
    out = io.StringIO()
    agent = _load_agent()
    code = agent.main(
        ["--user", "alice", "--base-url", live_server.url, "--key", api_key, "-m", "Where should files go?"],
        client=client,
        out=out,
    )

    assert code == 0
    [request] = sent
    system = request["system"]
    assert [("cache_control" in b) for b in system] == [False, True, False]
    assert system[0]["text"] == agent.INSTRUCTIONS and "on-prem" in system[-1]["text"]
    assert request["messages"] == [{"role": "user", "content": "Where should files go?"}]
    assert "assistant> Use your on-prem object store" in out.getvalue()
    assert "40 input tokens read from cache" in out.getvalue()
    session = AgentSession.objects.get(user=alice)
    assert list(Turn.objects.filter(session=session).values_list("role", flat=True)) == ["user", "assistant"]
    assert session.ended_at is not None
