"""memoryapp as the long-term memory of a Claude agent: a plain tool-use loop on the anthropic SDK.

    pip install ./clients/python anthropic
    MEMORYAPP_URL=http://127.0.0.1:8000 MEMORYAPP_API_KEY=mem_... ANTHROPIC_API_KEY=... \\
        python examples/claude_tools.py alice "Remember that I'm vegetarian, then suggest a dinner."
"""

import os
import sys

import anthropic
from memoryapp_client import MemoryappError, MemoryClient

TOOLS = [
    {"name": "remember", "description": "Store one durable fact about the user (one sentence, about them).",
     "input_schema": {"type": "object", "required": ["text", "kind"], "properties": {
         "text": {"type": "string"}, "kind": {"enum": ["preference", "constraint", "profile", "goal"]}}}},
    {"name": "search_memory", "description": "Find what is remembered about the user matching some words.",
     "input_schema": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}},
    {"name": "forget", "description": "Delete a remembered fact by its id when the user asks.",
     "input_schema": {"type": "object", "required": ["fact_id"], "properties": {"fact_id": {"type": "string"}}}},
]  # fmt: skip


def run_tool(memory, user, name, args):
    """One tool call against memoryapp; errors go back to the model as text, so it can rephrase."""
    try:
        if name == "remember":
            return memory.remember(user, args["text"], args["kind"]).outcome
        if name == "search_memory":
            return "\n".join(f"{f.id}: {f.text}" for f in memory.list_facts(user, q=args["query"]).facts) or "none"
        return f"deleted {memory.forget(args['fact_id'])}"
    except MemoryappError as exc:
        return f"error {exc.code}: {exc.message}"


def answer(memory, claude, user, message, model="claude-haiku-4-5-20251001"):
    """Answer one message: memory in the system prompt, then tool calls until Claude stops asking."""
    session = memory.open_session(user)
    system = memory.prompt(session.id, message, instructions="You are a helpful assistant with a memory tool.")
    messages = [{"role": "user", "content": message}]
    while True:
        reply = claude.messages.create(model=model, max_tokens=1024, system=system, tools=TOOLS, messages=messages)
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            break
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": run_tool(memory, user, b.name, b.input)}
                   for b in reply.content if b.type == "tool_use"]  # fmt: skip
        messages.append({"role": "user", "content": results})
    text = "".join(b.text for b in reply.content if b.type == "text")
    memory.add_turns(session.id, [("user", message), ("assistant", text or "(no text)")])
    memory.end_session(session.id)
    return text


if __name__ == "__main__":
    with MemoryClient(os.environ["MEMORYAPP_URL"], os.environ["MEMORYAPP_API_KEY"]) as mem:
        print(answer(mem, anthropic.Anthropic(), sys.argv[1], sys.argv[2]))
