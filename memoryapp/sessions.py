"""Agent sessions: who the user is, opening, appending turns, ending, and the sweeper."""

import hashlib
import re
import secrets
import unicodedata
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Max, Q

from memoryapp import clock, extraction, writing
from memoryapp.celery import app as celery_app
from memoryapp.models import AgentSession, ApiKey, ExternalIdentity, MemorySettings, Turn, default_scopes

# No control characters (PostgreSQL refuses NUL) and no "/": the id sits in the API's paths, and Django
# decodes %2F before routing, so a person with a slash in their id could never be exported or erased.
# No space at either end: "alice " would be a second person beside "alice". The spaces are spelt out so
# Python, pydantic's Rust engine and the OpenAPI schema's ECMAScript read one pattern alike.
_NOT_AT_THE_ENDS = r"\x00-\x20\x7f/\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
# Nor "." or "..": a URL reads them as "this folder" and "the one above", so no path could reach that person.
# (No look-ahead: pydantic's engine has none, so the two are left out by spelling the short ids out.)
# Nowhere: characters that show nothing ("bob\u200b" would be a second "bob" that looks the same), and
# U+FFFD, what bytes that are not UTF-8 in a path decode to (%FF%FE and %C0%AF would be one person).
_NOWHERE = r"\xad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\ufffd"
_END, _END_NOT_DOT = rf"[^{_NOT_AT_THE_ENDS}{_NOWHERE}]", rf"[^{_NOT_AT_THE_ENDS}{_NOWHERE}.]"
EXTERNAL_ID_PATTERN = (
    rf"^(?:{_END_NOT_DOT}|{_END_NOT_DOT}{_END}|\.{_END_NOT_DOT}|{_END}[^\x00-\x1f\x7f/{_NOWHERE}]{{1,126}}{_END})$"
)
EXTERNAL_ID = re.compile(EXTERNAL_ID_PATTERN)
QUEUE_LEASE = timedelta(minutes=2)
# How many batches' Idempotency-Keys a session keeps: a retry comes soon, but an agent may have a few in flight.
KEPT_BATCHES = 8


class SessionEnded(Exception):
    pass


class SessionGone(Exception):
    """The session was erased (with its person) while the call was on its way."""


class TooManyTurns(Exception):
    pass


class KeyReused(Exception):
    """An Idempotency-Key sent again with other turns than the batch it was first sent with."""


class Appended(NamedTuple):
    accepted: int
    replayed: bool = False  # the same batch under the same key again: nothing stored twice


# --- API keys ---------------------------------------------------------------


def hash_key(key):
    """The stored form of an API key (sha256 hex)."""
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(org, name, scopes=None):
    """A new key for `org` (read and write unless chosen): returns (ApiKey, the key, shown once and never stored)."""
    key = "mem_" + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        org=org, name=name, prefix=key[:12], key_hash=hash_key(key), scopes=list(scopes or default_scopes())
    )
    return api_key, key


def authenticate_key(key):
    """The active ApiKey for a presented key, or None."""
    if not key or len(key) > 200:
        return None
    api_key = ApiKey.objects.active().select_related("org").filter(key_hash=hash_key(key)).first()
    if api_key is not None:
        now = clock.now()
        if api_key.last_used_at is None or now - api_key.last_used_at > timedelta(minutes=1):
            ApiKey.objects.filter(id=api_key.id).update(last_used_at=now)
    return api_key


# --- end users ----------------------------------------------------------------


def find_user(org, external_id):
    """The person the agent calls `external_id` in `org`, or None: the id as stored, else its composed form."""
    if not EXTERNAL_ID.match(external_id or ""):
        return None  # no one can have this id (and Postgres would refuse a NUL in it)
    # "zoë" typed as z-o-e-◌̈ is the same id as the one-letter ë: new ids are stored composed (NFC). The id exactly
    # as given is looked up too, and wins, so one stored before this, in another form, is still reached.
    composed = unicodedata.normalize("NFC", external_id)
    found = {
        i.external_id: i.user
        for i in ExternalIdentity.objects.select_related("user").filter(
            org=org, external_id__in={external_id, composed}
        )
    }
    return found.get(external_id) or found.get(composed)


def get_or_create_user(org, external_id):
    """The person the agent calls `external_id`, created on first use as a remembered person of `org`.

    Known by the ExternalIdentity alone: never a Membership (members join by invitation and sign in),
    and never matched to an account by name; only the person themselves links an id to their account.
    """
    user = find_user(org, external_id)
    if user is not None:
        return user
    try:
        with transaction.atomic():
            user = new_remembered_person()
            ExternalIdentity.objects.create(org=org, user=user, external_id=unicodedata.normalize("NFC", external_id))
    except IntegrityError:
        return find_user(org, external_id)  # a concurrent request created them first
    return user


def new_remembered_person():
    """A person an agent remembers, with an empty memory: no password, so never a sign-in."""
    user = get_user_model()(username=f"u-{secrets.token_hex(8)}")
    user.set_unusable_password()  # before the one INSERT, not an UPDATE after it
    user.save()
    MemorySettings.objects.create(user=user)
    return user


def external_id_of(user, org=None):
    """The agent's id for `user` (in `org` when given), or None."""
    qs = ExternalIdentity.objects.filter(user=user)
    if org is not None:
        qs = qs.filter(org=org)
    ident = qs.first()
    return ident.external_id if ident else None


# --- sessions ---------------------------------------------------------------


def open_session(org, user, memory="on"):
    """Start a session; a user whose switch is off always gets memory off."""
    if not writing.memory_enabled(user):
        memory = AgentSession.Memory.OFF
    return AgentSession.objects.create(user=user, org=org, memory=memory)


def add_turns(session, turns, key=""):
    """Append turns (list of (role, content)) as one batch: all stored or none. A batch sent again with the
    `key` (an Idempotency-Key) of one of the session's last KEPT_BATCHES is answered as before and stored once."""
    limit = settings.MEMORY["MAX_TURNS_PER_SESSION"]
    mark = f"{_digest(turns)}:{key}" if key else ""
    with transaction.atomic():
        # The row lock orders concurrent appends to one session and checks "ended" and the key race-free.
        locked = AgentSession.objects.select_for_update().filter(id=session.id).first()
        if locked is None:
            raise SessionGone()
        kept = locked.last_batch.splitlines()
        sent_before = next((m for m in kept if key and m.partition(":")[2] == key), None)
        if sent_before is not None:
            if sent_before != mark:
                raise KeyReused()
            return Appended(len(turns), replayed=True)
        if locked.ended_at is not None:
            raise SessionEnded()
        if locked.turn_count + len(turns) > limit:
            raise TooManyTurns(limit)
        start = (Turn.objects.filter(session=locked).aggregate(m=Max("ordinal"))["m"] or 0) + 1
        now = clock.now()
        Turn.objects.bulk_create(
            Turn(user_id=locked.user_id, session=locked, ordinal=start + i, role=role, content=content, created_at=now)
            for i, (role, content) in enumerate(turns)
        )
        AgentSession.objects.filter(id=locked.id).update(
            last_activity_at=now,
            turn_count=locked.turn_count + len(turns),
            **({"last_batch": "\n".join([*kept, mark][-KEPT_BATCHES:])} if mark else {}),
        )
    return Appended(len(turns))


def _digest(turns):
    """A short digest of a batch's roles and texts, told apart from any other batch."""
    h = hashlib.sha256()
    for role, content in turns:
        h.update(f"{role}\x00{len(content)}\x00{content}".encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def enqueue_extraction(session_id, user_id):
    """Queue the session's extraction once the current transaction commits; the user id routes it (Citus)."""
    # Looked up by name, not imported: memoryapp.tasks imports this module. MemoryappConfig.ready
    # registers the task in every process that sets Django up (web, worker, MCP server, tests).
    celery_app.tasks["memoryapp.extract_session"].delay_on_commit(str(session_id), user_id)


def end_session(session, reason=AgentSession.EndReason.EXPLICIT):
    """Record the end and enqueue extraction after commit; ending twice is harmless."""
    # Every statement names the user as well as the session: per-user tables route by user_id (Citus).
    mine = AgentSession.objects.filter(id=session.id, **({"user_id": session.user_id} if session.user_id else {}))
    with transaction.atomic():
        now = clock.now()
        claimed = mine.filter(ended_at__isnull=True).update(ended_at=now, end_reason=reason)
        if not claimed:
            return False
        # Re-read the row and the person (their memory switch may have changed since the session opened).
        fresh = mine.select_related("user").get()
        for f in AgentSession._meta.concrete_fields:
            setattr(session, f.attname, getattr(fresh, f.attname))
        session.user = fresh.user
        if not writing.memory_allowed(session):
            extraction.skip_session(session)
            return True
        # The lease lets the sweeper re-enqueue if the broker lost (or never got) the message.
        mine.update(extraction_status=AgentSession.Extraction.QUEUED, next_attempt_at=clock.now() + QUEUE_LEASE)
        enqueue_extraction(session.id, session.user_id)
    return True


def sweep(now=None, batch=500):
    """End idle and capped sessions, and re-enqueue extraction nobody is working on."""
    now = now or clock.now()
    memory = settings.MEMORY
    idle_before = now - timedelta(minutes=memory["INACTIVITY_MINUTES"])
    cap_before = now - timedelta(hours=memory["HARD_CAP_HOURS"])
    ended = 0
    for reason, cond in (
        (AgentSession.EndReason.CAP, Q(started_at__lte=cap_before)),
        (AgentSession.EndReason.IDLE, Q(last_activity_at__lte=idle_before)),
    ):
        ids = list(AgentSession.objects.open().filter(cond).values_list("id", "user_id")[:batch])
        for sid, user_id in ids:
            # end_session's conditional update (ended_at IS NULL) lets exactly one sweeper claim it.
            if end_session(AgentSession(id=sid, user_id=user_id), reason=reason):
                ended += 1

    retry = settings.MEMORY["EXTRACTION_MAX_ATTEMPTS"]
    lease = now + QUEUE_LEASE
    due = AgentSession.objects.filter(ended_at__isnull=False, memory=AgentSession.Memory.ON).filter(
        # enqueued (or meant to be, while the broker was down), but not finished within the lease
        Q(extraction_status__in=["queued", "running"], next_attempt_at__lte=now)
        # failed, and its backoff has passed
        | Q(extraction_status="failed", next_attempt_at__lte=now, extraction_attempts__lt=retry)
    )
    enqueued = 0
    for sid, user_id, status, attempt_at in due.values_list("id", "user_id", "extraction_status", "next_attempt_at")[
        :batch
    ]:
        with transaction.atomic():
            # Conditional update: of several beats or workers, one claims the re-enqueue.
            claimed = AgentSession.objects.filter(
                id=sid, user_id=user_id, extraction_status=status, next_attempt_at=attempt_at
            ).update(extraction_status=AgentSession.Extraction.QUEUED, next_attempt_at=lease)
            if claimed and status == AgentSession.Extraction.RUNNING:
                # Its worker stopped renewing the lease (killed, or its machine went away): the
                # attempt it recorded is marked abandoned, in the same transaction as the takeover.
                extraction.abandon_runs(sid, user_id, now)
            if claimed:
                enqueue_extraction(sid, user_id)
                enqueued += 1
    return {"ended": ended, "enqueued": enqueued}
