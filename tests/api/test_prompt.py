"""POST /v1/prompt: Anthropic system blocks that keep the prompt cache warm, checked with the real SDK."""

import json

import anthropic
import httpx2
import pytest
from anthropic.types import TextBlockParam
from pydantic import ConfigDict, TypeAdapter

from memoryapp import embeddings, sessions
from memoryapp.models import MemoryFact
from tests.conftest import anthropic_reply

pytestmark = pytest.mark.django_db

INSTRUCTIONS = "You are a careful engineering assistant for Acme. Answer in British English."
TOOLS = "Use the search tool for documentation; never run shell commands without asking."

SystemBlocks = TypeAdapter(list[TextBlockParam], config=ConfigDict(extra="forbid"))


def _remember(org, external_id, text, kind="constraint"):
    user = sessions.get_or_create_user(org, external_id)
    MemoryFact.objects.create(
        user=user, text=text, kind=kind, embedding=embeddings.embed(text), embedding_model=embeddings.model_name()
    )


def _prompt(api, external_id, message="How should we store files?", **extra):
    sid = api.post("/v1/sessions", {"user": external_id}).json()["id"]
    payload = {"session": sid, "message": message, "instructions": INSTRUCTIONS, "tool_guidance": TOOLS, **extra}
    response = api.post("/v1/prompt", payload)
    assert response.status_code == 200, response.content
    return sid, response.json()["system"]


def _send(system):
    """Send `system` through the real anthropic SDK to a fake transport; return the JSON on the wire."""
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json=anthropic_reply("Keep the files on your own servers.", output_tokens=8))

    client = anthropic.Anthropic(api_key="x", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    reply = client.messages.create(
        model="claude-haiku-4-5-20251001",
        max_tokens=256,
        system=system,
        messages=[{"role": "user", "content": "How should we store files?"}],
    )
    assert reply.content[0].text.startswith("Keep the files")
    [body] = seen
    return body


def test_stable_blocks_first_with_the_breakpoint_and_memory_last_without(api, org):
    _remember(org, "alice", "The user's company is on-prem by contract and cannot use cloud services.")
    sid, system = _prompt(api, "alice")

    assert [b["text"] for b in system[:2]] == [INSTRUCTIONS, TOOLS]
    assert "cache_control" not in system[0]
    assert system[1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in system[2] and "on-prem" in system[2]["text"]
    assert len(system) == 3
    # The memory block is the session's block, byte for byte.
    assert system[2]["text"] == api.post("/v1/recall", {"session": sid, "message": "x"}).json()["block"]


def test_blocks_validate_against_the_sdks_own_request_types(api, org):
    _remember(org, "alice", "The user's company is on-prem by contract and cannot use cloud services.")
    _, system = _prompt(api, "alice")

    assert SystemBlocks.validate_python(system) == system
    with pytest.raises(ValueError):
        SystemBlocks.validate_python([{**system[0], "cache_control": {"type": "forever"}}])


def test_the_sdk_puts_exactly_these_blocks_on_the_wire(api, org):
    _remember(org, "alice", "The user's company is on-prem by contract and cannot use cloud services.")
    _, system = _prompt(api, "alice")

    body = _send(system)

    assert body["system"] == system
    breakpoints = [i for i, block in enumerate(body["system"]) if "cache_control" in block]
    assert breakpoints == [1]  # the last stable block; memory comes after it
    assert "on-prem" in body["system"][-1]["text"]


def test_two_users_share_the_cached_prefix_byte_for_byte(api, org):
    _remember(org, "alice", "The user's company is on-prem by contract and cannot use cloud services.")
    _remember(org, "bob", "The user is allergic to peanuts.")
    _, alice = _prompt(api, "alice")
    _, bob = _prompt(api, "bob", message="What should I cook tonight?")

    wire_alice, wire_bob = _send(alice), _send(bob)
    prefix = json.dumps(wire_alice["system"][:2], sort_keys=True)
    assert prefix == json.dumps(wire_bob["system"][:2], sort_keys=True)
    assert wire_alice["system"][2] != wire_bob["system"][2]


def test_later_prompts_in_a_session_keep_the_same_memory_bytes(api, org):
    _remember(org, "alice", "The user's company is on-prem by contract and cannot use cloud services.")
    sid, first = _prompt(api, "alice")
    _remember(org, "alice", "The user is a platform engineer.", "profile")

    payload = {"session": sid, "message": "Another turn", "instructions": INSTRUCTIONS, "tool_guidance": TOOLS}
    again = api.post("/v1/prompt", payload).json()["system"]
    assert json.dumps(again).encode() == json.dumps(first).encode()

    refreshed = api.post("/v1/prompt", {**payload, "refresh": True}).json()["system"]
    assert "platform engineer" in refreshed[-1]["text"] and refreshed[:2] == first[:2]


def test_no_memory_means_no_memory_block_and_still_a_breakpoint(api):
    _, system = _prompt(api, "newcomer")
    assert system == [
        {"type": "text", "text": INSTRUCTIONS},
        {"type": "text", "text": TOOLS, "cache_control": {"type": "ephemeral"}},
    ]
    assert _send(system)["system"] == system


def test_blank_stable_text_is_left_out_rather_than_sent_as_an_empty_block(api, org):
    _remember(org, "alice", "The user's company is on-prem by contract and cannot use cloud services.")
    _, system = _prompt(api, "alice", tool_guidance="   ")
    assert [("cache_control" in b) for b in system] == [True, False]
    assert all(b["text"].strip() for b in system)
    SystemBlocks.validate_python(system)
