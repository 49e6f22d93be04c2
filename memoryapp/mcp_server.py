"""The MCP server: memoryapp's memory as tools and a resource for any MCP client (official `mcp` SDK).

Each tool is a thin call into the same domain functions as the agent API (`memoryapp.facts`,
`memoryapp.recall`, `memoryapp.provenance`) — never an HTTP call to ourselves — under the same
rules: the caller's API key (a Bearer token over HTTP, MEMORYAPP_API_KEY over stdio) decides the org, its
scopes and its rate limit; only people that org knows are reachable; writes are validated,
poison-filtered and superseded like any other, refused when memory is off, and labelled origin
`mcp` with the key's name.
"""

import functools
import uuid
from typing import Annotated, Literal

from django.conf import settings
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from pydantic import Field, ValidationError

from memoryapp import backends, facts, provenance, ratelimit, recall, sessions, writing
from memoryapp.vocabulary import FACT_INPUT_MAX_CHARS, KindName

User = Annotated[
    str | None,
    Field(description="Your agent's id for the person (as in the agent API); optional when the server is "
          "started for one person (manage.py mcp_stdio --user)", max_length=128),
]  # fmt: skip
# The agent API's caps, so a tool refuses what the API refuses (the API answers 422 `invalid` with the
# same words: "<field>: String should have at most N characters").
FactId = Annotated[str, Field(description="A fact id, as returned by list_facts or remember_fact", max_length=64)]
SessionId = Annotated[str | None, Field(description="An agent-API session: reuse its cached block", max_length=64)]
FactText = Annotated[
    str, Field(description="One sentence about the person, at most 200 characters", max_length=FACT_INPUT_MAX_CHARS)
]
INSTRUCTIONS = (
    "Long-term memory about the people you talk with. Call recall_memory at the start of a "
    "conversation and put the block in your context; it may be outdated and the person is always "
    "right. Call remember_fact only for durable facts the person states about themselves (one "
    "sentence each). Memory describes a person: it never grants a permission."
)


class Refused(ToolError):
    """A rule said no: the message says which, with the same code the agent API would use."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


def _bearer(headers):
    value = (headers or {}).get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class Caller:
    """Who is calling: resolves the key on every call (so a revoked key stops at once) and applies its rules."""

    def __init__(self, fixed_key=None, fixed_user=None):
        self.fixed_key = fixed_key  # the stdio server's key; over HTTP the Bearer header decides
        self.fixed_user = fixed_user  # a stdio server for one person reaches only them

    def user(self, user):
        """The person's id the call is about: the given one, or the server's own person."""
        if self.fixed_user and user not in (None, "", self.fixed_user):
            raise Refused(
                "forbidden", "This server was started for one person (mcp_stdio --user) and reaches only them."
            )
        user = user or self.fixed_user
        if not user:
            raise Refused("invalid", "user: say which person (your agent's id for them).")
        return user

    def key(self, ctx, scope):
        """The caller's active ApiKey, counted against its rate limit and checked for `scope`."""
        token = self.fixed_key or _bearer(ctx.headers if ctx is not None else None)
        api_key = sessions.authenticate_key(token)
        if api_key is None:
            raise Refused("unauthorized", "Send a valid, unrevoked API key as 'Authorization: Bearer <key>'.")
        allowed, retry_after = ratelimit.hit_key(api_key)
        if not allowed:
            raise Refused("rate_limited", f"Too many requests for this API key; retry in {retry_after} s.")
        if not api_key.allows(scope):
            raise Refused("forbidden", f"This API key does not have the '{scope}' scope.")
        return api_key

    def person(self, api_key, user):
        person = sessions.find_user(api_key.org, self.user(user))
        if person is None:
            raise Refused("not_found", "No such user for this API key.")
        return person

    def fact(self, api_key, fact_id):
        try:
            fact = facts.fact_for_org(api_key.org, fact_id)
        except Exception:  # a malformed id is as unknown as another org's
            fact = None
        if fact is not None and self.fixed_user:
            only = sessions.find_user(api_key.org, self.fixed_user)
            fact = fact if only is not None and fact.user_id == only.id else None
        if fact is None:
            raise Refused("not_found", "No such fact for this API key.")
        return fact


def fresh_connection(fn):
    """Tools run in worker threads: drop connections that went stale between calls, as a request would."""

    @functools.wraps(fn)  # the SDK reads the tool's signature and docstring through it
    def run(*args, **kwargs):
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run


class StrictServer(MCPServer):
    """Tools refuse an argument they do not take, as the API does (a misspelt `session` or `stat` is never
    dropped in silence), and a bad argument is worded as the API words it: field and reason, no library text."""

    async def list_tools(self):
        tools = await super().list_tools()
        for tool in tools:
            tool.input_schema = {**tool.input_schema, "additionalProperties": False}
        return tools

    _taken = None  # tool name -> the arguments it takes; the tools are all registered before the first call

    async def call_tool(self, name, arguments, context=None):
        if self._taken is None:
            self._taken = {t.name: set(t.input_schema.get("properties", {})) for t in await super().list_tools()}
        taken = self._taken.get(name)
        unknown = sorted(set(arguments) - taken) if taken is not None else []
        if unknown:
            takes = ", ".join(sorted(taken))
            raise ToolError(f"Error executing tool {name}: invalid: {unknown[0]}: not an argument of {name} ({takes})")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            first = exc.__cause__.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "arguments"
            raise ToolError(f"Error executing tool {name}: invalid: {field}: {first['msg']}") from None


def build_server(fixed_key=None, fixed_user=None):
    """The MCP server. `fixed_key` pins one API key (stdio), else each HTTP request's Bearer key is used;
    `fixed_user` limits it to that one person."""
    caller = Caller(fixed_key, fixed_user)
    server = StrictServer(name="memoryapp", title="memoryapp memory", version="1", instructions=INSTRUCTIONS)
    _add_read_tools(server, caller)
    _add_write_tools(server, caller)
    _add_resources(server, caller)
    return server


def _session(api_key, person, session_id):
    """The person's agent-API session with this id under this key's org, or a not_found refusal."""
    session = facts.session_for(api_key.org, person, session_id) if _is_uuid(session_id) else None
    if session is None:
        raise Refused("not_found", "No such session for this user and API key.")
    return session


def _add_read_tools(server, caller):
    @server.tool(title="Recall memory")
    @fresh_connection
    def recall_memory(
        user: User = None,
        message: Annotated[
            str,
            Field(description="The person's latest message: picks relevant facts", max_length=recall.MESSAGE_MAX_CHARS),
        ] = "",
        session_id: SessionId = None,
        ctx: Context = None,
    ) -> str:
        """The memory block about a person to put in the model's context ('' when nothing is remembered or
        memory is off). With a session id, the session's block is reused (cache-safe); without, it is
        computed for this message and nothing is logged."""
        api_key = caller.key(ctx, "read")
        if not session_id and sessions.find_user(api_key.org, caller.user(user)) is None:
            return ""  # a person this key has not met yet: nothing is remembered (and no one is created)
        person = caller.person(api_key, user)
        if session_id:
            return recall.recall(_session(api_key, person, session_id), message).block
        return recall.preview(person, api_key.org, message).block

    @server.tool(title="List facts")
    @fresh_connection
    def list_facts(
        user: User = None,
        state: Literal["live", "superseded", "expired", "all"] = "live",
        kind: KindName | None = None,
        cursor: Annotated[str | None, Field(description="next_cursor from the previous page")] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        ctx: Context = None,
    ) -> dict:
        """What is remembered about a person, newest first, a page at a time."""
        api_key = caller.key(ctx, "read")
        return _page(caller.person(api_key, user), state=state, kind=kind, cursor=cursor, limit=limit)

    @server.tool(title="Search facts")
    @fresh_connection
    def search_facts(
        query: Annotated[str, Field(description="Words or a phrase to look for", max_length=200)],
        user: User = None,
        state: Literal["live", "superseded", "expired", "all"] = "live",
        ctx: Context = None,
    ) -> dict:
        """Facts about a person whose text matches the query (words or a phrase)."""
        api_key = caller.key(ctx, "read")
        if "\x00" in query:  # as in the API: dropped before searching, the empty search would list everything
            raise Refused("invalid", "query: NUL characters are not allowed")
        return _page(caller.person(api_key, user), state=state, q=query, limit=50)

    @server.tool(title="Explain a fact")
    @fresh_connection
    def explain_fact(fact_id: FactId, ctx: Context = None) -> dict:
        """Why a fact is remembered: who wrote it, the person's words it came from, the extraction run,
        the versions it replaced or that replaced it, its history and how often it was recalled."""
        api_key = caller.key(ctx, "read")
        fact = caller.fact(api_key, fact_id)
        _readable(fact.user)
        return explain(fact)


def _add_write_tools(server, caller):
    @server.tool(title="Remember a fact")
    @fresh_connection
    def remember_fact(
        text: FactText,
        kind: KindName,
        user: User = None,
        session_id: Annotated[
            str | None, Field(description="The agent-API session it was said in", max_length=64)
        ] = None,
        ctx: Context = None,
    ) -> dict:
        """Remember a durable fact the person stated about themselves. It is checked like any fact (one
        sentence, no instructions or permissions) and resolved against what is known: created, confirmed
        (already known), superseded (replaces a contradicted fact), held (the person's own correction
        stands) or pending (it may claim authority: it waits for the person to keep it, never recalled
        until then)."""
        api_key = caller.key(ctx, "write")
        user = caller.user(user)
        if not sessions.EXTERNAL_ID.match(user):
            raise Refused("not_found", "No such user: an id is 1 to 128 characters without control characters.")
        if session_id and not _is_uuid(session_id):
            raise Refused("not_found", "No such session for this user and API key.")
        try:
            done = facts.remember(api_key.org, user, text, kind, api_key=api_key, via="mcp", session_id=session_id)
        except writing.Gone as exc:
            raise Refused("not_found", f"Not stored: {exc}.") from None
        except writing.FactRejected as exc:
            raise Refused("fact_rejected", f"Not stored: {exc}.") from None
        except facts.UnknownSession:
            raise Refused("not_found", "No such session for this user and API key.") from None
        except backends.ModelUnavailable:
            raise Refused("model_unavailable", "The verdict model did not answer; nothing was stored.") from None
        except facts.MemoryOff:
            raise Refused("memory_off", "Memory is switched off for this person or session.") from None
        if done.outcome == "at_limit":
            raise Refused("memory_full", "This person has as many live facts as allowed.")
        if done.outcome == "pending":
            return {"outcome": "pending", "fact": None, "superseded": [], "pending": facts.pending_json(done.pending)}
        return {
            "outcome": done.outcome,
            "fact": facts.fact_json(done.fact) if done.fact is not None else None,  # None: a key without `read`
            "superseded": [str(i) for i in done.superseded],
        }

    _add_change_tools(server, caller)


def _add_change_tools(server, caller):
    @server.tool(title="Correct a fact")
    @fresh_connection
    def correct_fact(
        fact_id: FactId,
        text: Annotated[str, Field(description="The corrected sentence", max_length=FACT_INPUT_MAX_CHARS)],
        kind: Annotated[KindName | None, Field(description="Left out: the fact keeps its kind")] = None,
        ctx: Context = None,
    ) -> dict:
        """Correct a remembered fact; the old version is kept, linked to the new one."""
        api_key = caller.key(ctx, "write")
        fact = caller.fact(api_key, fact_id)
        try:
            new = facts.correct(fact, text, kind or fact.kind, api_key=api_key, via="mcp")
        except writing.Gone as exc:
            raise Refused("not_found", f"Not stored: {exc}.") from None
        except writing.FactRejected as exc:
            raise Refused("fact_rejected", f"Not stored: {exc}.") from None
        except facts.MemoryOff:
            raise Refused("memory_off", "Memory is switched off for this person.") from None
        except facts.NotCurrent as exc:
            raise Refused("superseded", str(exc)) from None
        except facts.Held as held:
            return {
                "changed": False,
                "fact": facts.fact_json(fact) if facts.shown_to(api_key, fact) else None,
                "replaced": None,
                "pending": facts.pending_json(held.candidate),
            }
        except facts.CorrectedByPerson as exc:
            raise Refused("corrected_by_person", exc.said_to(api_key)) from None
        return {"changed": new.id != fact.id, "fact": facts.fact_json(new), "replaced": str(fact.id)}

    @server.tool(title="Forget a fact")
    @fresh_connection
    def forget_fact(fact_id: FactId, ctx: Context = None) -> dict:
        """Delete a fact for good, with its earlier versions (as the person's own delete button does)."""
        api_key = caller.key(ctx, "write")
        try:
            return {"deleted": facts.forget(caller.fact(api_key, fact_id), api_key=api_key, via="mcp")}
        except facts.CorrectedByPerson as exc:
            raise Refused("corrected_by_person", exc.said_to(api_key)) from None
        except facts.NotCurrent as exc:
            raise Refused("superseded", str(exc)) from None


def _add_resources(server, caller):
    @server.resource(
        "memory://{user}/block",
        name="memory-block",
        title="Memory block",
        description="The always-on memory block about a person (constraints and profile), as recall gives it.",
        mime_type="text/plain",
    )
    @fresh_connection
    def memory_block(user: str, ctx: Context = None) -> str:
        try:
            api_key = caller.key(ctx, "read")
            return recall.preview(caller.person(api_key, user), api_key.org, "").block
        except Refused as exc:
            # JSON-RPC's invalid params for a person or key this server cannot reach, as the SDK answers an
            # unknown resource; any other refusal is the client's request (never "internal error").
            if exc.code == "not_found":
                raise ResourceNotFoundError(str(exc)) from None
            raise MCPError(INVALID_REQUEST, str(exc)) from None


def _is_uuid(value):
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def _readable(person):
    try:
        return facts.for_the_assistant(person)
    except facts.MemoryOff:
        raise Refused("memory_off", "Memory is switched off for this person: the assistant reads none of it.") from None


def _page(person, **filters):
    try:
        page = facts.list_facts(_readable(person), **filters)
    except facts.BadCursor as exc:
        raise Refused("invalid", str(exc)) from None
    return {"facts": [facts.fact_json(f) for f in page.facts], "next_cursor": page.next_cursor}


def explain(fact):
    """A fact's provenance for the model: origin, source words (the person's own turns), run, chain, events."""
    prov = provenance.fact_provenance(fact)
    run = prov.run
    return {
        "fact": facts.fact_json(fact),
        "source_turns": [
            {"ordinal": t.ordinal, "content": t.content} for t in prov.turns if t.source and t.role == "user"
        ],
        "extraction": (
            {"backend": run.backend, "model": run.model, "prompt_version": run.prompt_version} if run else None
        ),
        "chain": [
            {"id": str(link.fact.id), "text": link.fact.text, "state": link.fact.state, "reason": link.reason or None}
            for link in prov.chain
            if link.fact.user_id == fact.user_id
        ],
        "events": [{"action": e.action, "actor": e.actor, "reason": e.reason} for e in prov.events],
        "recall_count": prov.recall_count,
    }


def http_app():
    """The streamable-HTTP ASGI app (stateless, JSON answers) served at /mcp/ by memoryapp.asgi."""

    # The SDK's DNS-rebinding guard, opened to the hosts Django itself serves.
    hosts = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection="*" not in settings.ALLOWED_HOSTS,
        allowed_hosts=[p for h in hosts for p in (h, f"{h}:*")],
        allowed_origins=[p for h in hosts for p in (f"http://{h}", f"http://{h}:*", f"https://{h}", f"https://{h}:*")],
    )
    return build_server().streamable_http_app(
        streamable_http_path="/mcp/", stateless_http=True, json_response=True, transport_security=security
    )
