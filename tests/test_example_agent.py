"""examples/agent.py run the way a developer runs it, against a live server, over HTTP only."""

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx2
import pytest

from memoryapp import embeddings, sessions
from memoryapp.models import AgentSession, MemoryFact, Turn
from tests.conftest import anthropic_reply, worker_database_url

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


README = AGENT.parent.parent / "README.md"


def _readme_commands(heading):
    """The shell commands of a README section's indented code blocks, continuation lines joined."""
    section = README.read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    commands, pending = [], ""
    for line in section.splitlines():
        if not line.startswith("    ") or line.strip().startswith(("{", "}", '"')):
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        commands.append(pending)
        pending = ""
    return commands


@pytest.mark.slow
def test_the_readme_agent_commands_work_as_written(live_server, tmp_path):
    """Copied from the README into a shell with no virtualenv active, as after `make run` on a fresh clone."""
    venv_bin = os.path.dirname(sys.executable)
    root = str(AGENT.parent.parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if os.path.realpath(p) != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=path, DATABASE_URL=worker_database_url(), MEMORYAPP_DATA_DIR=str(tmp_path))

    def shell(command):
        command = command.replace(".venv/bin/", venv_bin + "/").replace("http://127.0.0.1:8000", live_server.url)
        done = subprocess.run(["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    agent = _readme_commands("## Talk to it like an agent")
    create, export, *chat = agent
    assert "create_api_key" in create and export.startswith("export ")
    key = re.search(r"mem_[A-Za-z0-9_-]{20,}", shell(create)).group(0)
    env.update(MEMORYAPP_URL=live_server.url, MEMORYAPP_API_KEY=key)
    runnable = [c for c in chat if "ANTHROPIC_API_KEY=" not in c]  # the last one needs a model key
    assert len(runnable) == 2
    for command in runnable:
        assert "--- system prompt" in shell(command)
    assert AgentSession.objects.filter(user__external_ids__external_id="alice", ended_at__isnull=False).count() == 2

    # The HTTP section, up to the commands that need a fact id from an earlier answer.
    http = [c for c in _readme_commands("## Use it from your agent") if c.startswith(("H=", "curl"))]
    runnable = [c for c in http if "<id>" not in c]
    assert len(runnable) >= 3
    out = shell("\n".join(runnable).replace("mem_…", key))
    assert '"outcome"' in out and "vegetarian" in out

    # The Python client's snippet, with the key it was given.
    snippet = README.read_text().split("```python\n", 1)[1].split("```", 1)[0]
    out = shell(f".venv/bin/python - <<'PY'\n{snippet.replace('mem_…', key)}\nPY")
    assert "vegetarian" in out.lower()


def test_make_run_installs_the_client_the_examples_import(tmp_path):
    """`make run` installs what the README's agent commands import (a dry run into a fresh venv path)."""
    root = AGENT.parent.parent
    done = subprocess.run(
        ["make", "-n", "run", f"VENV={tmp_path / 'venv'}"], cwd=root, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if "pip install" in line]
    assert any(line.rstrip().endswith("./clients/python") for line in installs), done.stdout
    assert done.stdout.index("./clients/python") < done.stdout.index("scripts/run")
