"""A small chat agent with long-term memory, using memoryapp's API exactly as a real agent would.

    export MEMORYAPP_URL=http://127.0.0.1:8000 MEMORYAPP_API_KEY=mem_...   # manage.py create_api_key
    python examples/agent.py --user alice                  # chat; an empty line or Ctrl-D ends the session
    python examples/agent.py --user alice -m "We're on-prem, contractually."  -m "Thanks!"   # scripted

With ANTHROPIC_API_KEY set it talks to Claude through the anthropic SDK; without it, it prints the system
prompt it would have sent (stable blocks with the cache breakpoint, then the memory block) and records only
your turns. It needs the memoryapp client (pip install ./clients/python), and the anthropic SDK to call Claude.
"""

import argparse
import os
import sys

from memoryapp_client import MemoryappError, MemoryClient

INSTRUCTIONS = (
    "You are a helpful, concise engineering assistant. Give concrete, practical answers. "
    "Respect the user's stated constraints and preferences."
)
TOOL_GUIDANCE = "You have no tools in this example. If you would need one, say what you would look up instead."


class MemoryApi:
    """The four calls an agent makes, through the memoryapp client: open, assemble the prompt, append, end."""

    def __init__(self, base_url, key, timeout=30):
        self.client = MemoryClient(base_url, key, timeout=timeout)

    def open_session(self, user, memory="on"):
        return str(self.client.open_session(user, memory).id)

    def system_prompt(self, session, message):
        return self.client.prompt(session, message, instructions=INSTRUCTIONS, tool_guidance=TOOL_GUIDANCE)

    def add_turns(self, session, turns):
        return self.client.add_turns(session, turns)

    def end_session(self, session):
        return {"status": self.client.end_session(session)}


def claude_client():
    """The anthropic client when ANTHROPIC_API_KEY is set, else None (prompt-printing mode)."""
    if not os.environ.get("ANTHROPIC_API_KEY"):
        return None
    import anthropic

    return anthropic.Anthropic()


def print_system(system, out):
    out.write("--- system prompt (no ANTHROPIC_API_KEY, so nothing is sent) ---\n")
    for i, block in enumerate(system):
        label = "cache breakpoint" if "cache_control" in block else ("memory" if i == len(system) - 1 else "stable")
        out.write(f"[{i}] ({label})\n{block['text']}\n")
    out.write("--- end of system prompt ---\n")


def chat(api, user, messages, *, client=None, model="claude-haiku-4-5-20251001", memory="on", out=sys.stdout):
    """One session: for each user message assemble the prompt, answer, record the turns; then end it."""
    session = api.open_session(user, memory)
    out.write(f"session {session} for {user} (memory {memory})\n")
    history = []
    try:
        for message in messages:
            system = api.system_prompt(session, message)
            history.append({"role": "user", "content": message})
            if client is None:
                print_system(system, out)
                api.add_turns(session, [{"role": "user", "content": message}])
                continue
            reply = client.messages.create(model=model, max_tokens=1024, system=system, messages=history)
            text = "".join(block.text for block in reply.content if block.type == "text")
            history.append({"role": "assistant", "content": text})
            out.write(f"assistant> {text}\n")
            cached = getattr(reply.usage, "cache_read_input_tokens", None)
            if cached:
                out.write(f"(prompt cache: {cached} input tokens read from cache)\n")
            api.add_turns(session, [{"role": "user", "content": message}, {"role": "assistant", "content": text}])
    finally:
        status = api.end_session(session)["status"]
        out.write(f"session ended; memory extraction {status}\n")
    return session


def _typed_messages():
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            return
        if not line or line in ("/quit", "/exit"):
            return
        yield line


def main(argv=None, client=None, out=sys.stdout):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--user", required=True, help="your agent's id for the person (any string)")
    parser.add_argument("--base-url", default=os.environ.get("MEMORYAPP_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=os.environ.get("MEMORYAPP_API_KEY"), help="or set MEMORYAPP_API_KEY")
    parser.add_argument("-m", "--message", action="append", help="send this message (repeatable); else chat")
    parser.add_argument("--memory", choices=["on", "off"], default="on", help="off: nothing recalled or kept")
    parser.add_argument("--model", default=os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5-20251001"))
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("an API key is needed: --key or MEMORYAPP_API_KEY (create one with manage.py create_api_key)")
    api = MemoryApi(args.base_url, args.key)
    messages = args.message if args.message else _typed_messages()
    try:
        chat(api, args.user, messages, client=client or claude_client(), model=args.model, memory=args.memory, out=out)
    except MemoryappError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
