"""Sync and async clients. Each API call is described once (`_Call`) and run by either transport."""

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from memoryapp_client import models
from memoryapp_client.errors import MemoryappError

RETRY_STATUSES = (429, 503)


@dataclass
class _Call:
    method: str
    path: str
    model: Any = None  # a pydantic model for the answer, or None for plain JSON
    json: Any = None
    params: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    # Safe to send again when the answer was lost (no connection, a timeout): the server stores it once.
    retry_when_unreachable: bool = False

    def parse(self, response):
        data = response.json()
        return self.model.model_validate(data) if self.model is not None else data


def _params(**values):
    return {k: v for k, v in values.items() if v is not None}


def _turns(turns):
    out = []
    for t in turns:
        if isinstance(t, tuple):
            t = {"role": t[0], "content": t[1]}
        out.append(dict(t))
    return out


class _Calls:
    """The API, one method per route; both clients expose these through `_run`."""

    # sessions
    def _open_session(self, user, memory="on"):
        return _Call("POST", "/sessions", models.Session, {"user": user, "memory": memory})

    def _add_turns(self, session, turns):
        # One Idempotency-Key per batch: a retry after a lost answer is stored once, not twice.
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        body = {"turns": _turns(turns)}
        return _Call(
            "POST", f"/sessions/{session}/turns", models.Accepted, body, headers=headers, retry_when_unreachable=True
        )

    def _end_session(self, session):
        # Ending an ended session is harmless (the server queues its extraction once): safe to send again.
        return _Call("POST", f"/sessions/{session}/end", models.Queued, retry_when_unreachable=True)

    def _session(self, session):
        return _Call("GET", f"/sessions/{session}", models.SessionStatus)

    # recall
    def _recall(self, session, message="", refresh=False):
        return _Call(
            "POST", "/recall", models.Recall, {"session": str(session), "message": message, "refresh": refresh}
        )

    def _prompt(self, session, message="", instructions="", tool_guidance="", refresh=False):
        body = {
            "session": str(session),
            "message": message,
            "instructions": instructions,
            "tool_guidance": tool_guidance,
            "refresh": refresh,
        }
        return _Call("POST", "/prompt", models.Prompt, body)

    def _session_recall(self, session):
        return _Call("GET", f"/sessions/{session}/recall", models.SessionRecall)

    # facts
    def _list_facts(self, user, state="live", kind=None, q=None, cursor=None, limit=None):
        params = _params(state=state, kind=kind, q=q, cursor=cursor, limit=limit)
        return _Call("GET", f"/users/{_quote(user)}/facts", models.FactPage, params=params)

    def _list_pending(self, user, cursor=None, limit=None):
        params = _params(cursor=cursor, limit=limit)
        return _Call("GET", f"/users/{_quote(user)}/pending", models.PendingPage, params=params)

    def _get_fact(self, fact_id):
        return _Call("GET", f"/facts/{fact_id}", models.FactDetail)

    def _remember(self, user, text, kind, session=None):
        body = {"text": text, "kind": kind, **({"session": str(session)} if session else {})}
        return _Call("POST", f"/users/{_quote(user)}/facts", models.Remembered, body)

    def _correct(self, fact_id, text, kind=None):
        body = {"text": text, **({"kind": kind} if kind else {})}
        return _Call("PATCH", f"/facts/{fact_id}", models.Corrected, body)

    def _forget(self, fact_id):
        return _Call("DELETE", f"/facts/{fact_id}", models.Deleted)

    # people
    def _portal_link(self, user):
        return _Call("POST", f"/users/{_quote(user)}/portal", models.PortalLink)

    def _export_user(self, user):
        return _Call("GET", f"/users/{_quote(user)}/export")

    def _erase_user(self, user):
        return _Call("DELETE", f"/users/{_quote(user)}", models.Receipt)


def _quote(user):
    return quote(str(user), safe="")


class _Base(_Calls):
    def __init__(self, base_url, api_key, *, timeout=30.0, max_retries=3, max_retry_wait=30.0, transport=None):
        """`base_url` of the service (e.g. http://127.0.0.1:8000); `api_key` an org's key (mem_...).

        429 and 503 answers are retried up to `max_retries` times after the server's Retry-After,
        but never when it asks for more than `max_retry_wait` seconds: then the error is raised.
        `add_turns` is also sent again when its answer is lost (no connection, a timeout), under one
        Idempotency-Key, so the server stores the batch once.
        """
        self.base_url = base_url.rstrip("/") + "/api/v1"
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self._options = {
            "base_url": self.base_url,
            "headers": {"Authorization": f"Bearer {api_key}", "User-Agent": "memoryapp-client/0.1"},
            "timeout": timeout,
            **({"transport": transport} if transport is not None else {}),
        }

    def _wait_before_retry(self, response, attempt):
        """Seconds to wait before retrying this answer, or None to raise it now."""
        if response.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        error = MemoryappError.from_response(response)
        wait = error.retry_after if error.retry_after is not None else min(8.0, 0.5 * 2**attempt)
        return wait if wait <= self.max_retry_wait else None

    def _wait_before_resending(self, call, exc, attempt):
        """Seconds to wait before sending a call again whose answer never came, or raise it as unreachable."""
        if not call.retry_when_unreachable or attempt >= self.max_retries:
            # Some transport errors have no message of their own (a read timeout): their name says what happened.
            what = str(exc) or type(exc).__name__
            raise MemoryappError(0, "unreachable", f"{call.method} {call.path}: {what}") from exc
        return min(8.0, 0.5 * 2**attempt)

    @staticmethod
    def _send_options(call):
        return {"json": call.json, "params": call.params or None, "headers": call.headers or None}


class MemoryClient(_Base):
    """The agent API, synchronously. Use as a context manager, or call close()."""

    def __init__(self, base_url, api_key, **options):
        super().__init__(base_url, api_key, **options)
        self._http = httpx.Client(**self._options)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._http.close()

    def _run(self, call):
        attempt = 0
        while True:
            try:
                response = self._http.request(call.method, call.path, **self._send_options(call))
            except httpx.TransportError as exc:
                time.sleep(self._wait_before_resending(call, exc, attempt))
                attempt += 1
                continue
            if response.is_success:
                return call.parse(response)
            wait = self._wait_before_retry(response, attempt)
            if wait is None:
                raise MemoryappError.from_response(response)
            time.sleep(wait)
            attempt += 1

    def open_session(self, user, memory="on") -> models.Session:
        """Open a session for the agent's user (created on first use); memory "off" keeps nothing."""
        return self._run(self._open_session(user, memory))

    def add_turns(self, session, turns) -> int:
        """Append turns: dicts {"role", "content"} or (role, content) tuples; returns how many were accepted."""
        return self._run(self._add_turns(session, turns)).accepted

    def end_session(self, session) -> str:
        """End the session; extraction is queued. Returns the extraction status."""
        return self._run(self._end_session(session)).status

    def session(self, session) -> models.SessionStatus:
        """The session's state and the facts it wrote, confirmed and superseded."""
        return self._run(self._session(session))

    def recall(self, session, message="", refresh=False) -> models.Recall:
        """The session's memory block (computed once per session unless `refresh`)."""
        return self._run(self._recall(session, message, refresh))

    def prompt(self, session, message="", instructions="", tool_guidance="", refresh=False) -> list:
        """Anthropic system blocks (list of dicts): stable text with the cache breakpoint, then memory."""
        blocks = self._run(self._prompt(session, message, instructions, tool_guidance, refresh)).system
        return [b.to_anthropic() for b in blocks]

    def session_recall(self, session) -> models.SessionRecall:
        """What the session's memory blocks held, and why."""
        return self._run(self._session_recall(session))

    def list_facts(self, user, state="live", kind=None, q=None, cursor=None, limit=None) -> models.FactPage:
        """One page of the user's facts, newest first; pass `next_cursor` back for the next page."""
        return self._run(self._list_facts(user, state, kind, q, cursor, limit))

    def list_pending(self, user, cursor=None, limit=None) -> models.PendingPage:
        """One page of what waits for the person's word (never recalled until they keep it), with why."""
        return self._run(self._list_pending(user, cursor, limit))

    def iter_facts(self, user, state="live", kind=None, q=None, limit=None):
        """Every matching fact, page after page."""
        cursor = None
        while True:
            page = self.list_facts(user, state, kind, q, cursor, limit)
            yield from page.facts
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_fact(self, fact_id) -> models.FactDetail:
        """One fact with its supersession chain, events and recalls."""
        return self._run(self._get_fact(fact_id))

    def remember(self, user, text, kind, session=None) -> models.Remembered:
        """Remember one fact about the user (validated, filtered and superseded like an extracted one)."""
        return self._run(self._remember(user, text, kind, session))

    def correct(self, fact_id, text, kind=None) -> models.Corrected:
        """Correct a fact (its kind kept unless given); the old version is kept and linked."""
        return self._run(self._correct(fact_id, text, kind))

    def forget(self, fact_id) -> int:
        """Delete a fact and its earlier versions; returns how many rows went."""
        return self._run(self._forget(fact_id)).deleted

    def portal_link(self, user) -> models.PortalLink:
        """A one-time sign-in link to the user's own memory pages."""
        return self._run(self._portal_link(user))

    def export_user(self, user) -> dict:
        """Everything held about the user, as one JSON document."""
        return self._run(self._export_user(user))

    def erase_user(self, user) -> models.Receipt:
        """Erase the user and everything held about them."""
        return self._run(self._erase_user(user))


class AsyncMemoryClient(_Base):
    """The agent API for asyncio code: the same methods as MemoryClient, awaitable."""

    def __init__(self, base_url, api_key, **options):
        super().__init__(base_url, api_key, **options)
        self._http = httpx.AsyncClient(**self._options)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    async def aclose(self):
        await self._http.aclose()

    async def _run(self, call):
        attempt = 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, **self._send_options(call))
            except httpx.TransportError as exc:
                await asyncio.sleep(self._wait_before_resending(call, exc, attempt))
                attempt += 1
                continue
            if response.is_success:
                return call.parse(response)
            wait = self._wait_before_retry(response, attempt)
            if wait is None:
                raise MemoryappError.from_response(response)
            await asyncio.sleep(wait)
            attempt += 1

    async def open_session(self, user, memory="on") -> models.Session:
        return await self._run(self._open_session(user, memory))

    async def add_turns(self, session, turns) -> int:
        return (await self._run(self._add_turns(session, turns))).accepted

    async def end_session(self, session) -> str:
        return (await self._run(self._end_session(session))).status

    async def session(self, session) -> models.SessionStatus:
        return await self._run(self._session(session))

    async def recall(self, session, message="", refresh=False) -> models.Recall:
        return await self._run(self._recall(session, message, refresh))

    async def prompt(self, session, message="", instructions="", tool_guidance="", refresh=False) -> list:
        blocks = (await self._run(self._prompt(session, message, instructions, tool_guidance, refresh))).system
        return [b.to_anthropic() for b in blocks]

    async def session_recall(self, session) -> models.SessionRecall:
        return await self._run(self._session_recall(session))

    async def list_facts(self, user, state="live", kind=None, q=None, cursor=None, limit=None) -> models.FactPage:
        return await self._run(self._list_facts(user, state, kind, q, cursor, limit))

    async def list_pending(self, user, cursor=None, limit=None) -> models.PendingPage:
        return await self._run(self._list_pending(user, cursor, limit))

    async def iter_facts(self, user, state="live", kind=None, q=None, limit=None):
        cursor = None
        while True:
            page = await self.list_facts(user, state, kind, q, cursor, limit)
            for fact in page.facts:
                yield fact
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def get_fact(self, fact_id) -> models.FactDetail:
        return await self._run(self._get_fact(fact_id))

    async def remember(self, user, text, kind, session=None) -> models.Remembered:
        return await self._run(self._remember(user, text, kind, session))

    async def correct(self, fact_id, text, kind=None) -> models.Corrected:
        return await self._run(self._correct(fact_id, text, kind))

    async def forget(self, fact_id) -> int:
        return (await self._run(self._forget(fact_id))).deleted

    async def portal_link(self, user) -> models.PortalLink:
        return await self._run(self._portal_link(user))

    async def export_user(self, user) -> dict:
        return await self._run(self._export_user(user))

    async def erase_user(self, user) -> models.Receipt:
        return await self._run(self._erase_user(user))
