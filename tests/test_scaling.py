"""Past one machine (docs/scaling.md): the agent paths route to one shard, extraction stays exactly-once
with four workers, and page reads go to a replica only when that is safe."""

import re
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.http import HttpResponse
from django.test import RequestFactory, override_settings
from django.test.utils import CaptureQueriesContext

from memoryapp import clock, embeddings, extraction, recall, replica, sessions, tasks, writing
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact
from tests.conftest import wait_for

# Tables keyed by user_id that Citus would distribute by it (docs/scaling.md).
PER_USER_TABLES = (
    "memoryapp_agentsession",
    "memoryapp_turn",
    "memoryapp_extractionrun",
    "memoryapp_memoryfact",
    "memoryapp_factevent",
    "memoryapp_recalllog",
    "memoryapp_memorysettings",
)
_TABLE = re.compile(r'"?(' + "|".join(PER_USER_TABLES) + r')"?\b')


def _routes_to_one_user(sql, user_id):
    """Whether a statement names the user's id as its distribution key: in a WHERE (or JOIN) condition on
    user_id, or as the user_id value of an INSERT. Statements on org facts (user_id NULL) are listed apart."""
    uid = str(user_id)
    if sql.lstrip().upper().startswith("INSERT"):
        columns = re.search(r"\(([^)]*)\)\s*(VALUES|SELECT)", sql, re.S)
        return bool(columns and "user_id" in columns.group(1))
    if sql.lstrip().upper().startswith(("UPDATE", "DELETE", "SELECT")):
        # Only the conditions count: "SET user_id = 5" (a whole-row save) does not route anything.
        sql = sql.split(" WHERE ", 1)[1] if " WHERE " in sql else ""
    patterns = (
        rf'"?user_id"?\s*=\s*{uid}\b',
        rf"user_id\s*=\s*{uid}\b",
        rf"\.\"?user_id\"?\s*=\s*{uid}\b",
        rf'"?user_id"?\s+IN\s+\(\s*{uid}\s*\)',
    )
    return any(re.search(p, sql) for p in patterns)


def _offenders(queries, user_id):
    bad = []
    for q in queries:
        sql = q["sql"]
        if not _TABLE.search(sql) or sql.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK")):
            continue
        # The org tier lives in the fact table with user_id NULL: under Citus it becomes its own table
        # (docs/scaling.md); its statements filter by org and are checked for that instead.
        org_only = "scope = 'org'" in sql and "user_id" not in sql.split("scope = 'org'")[0][-200:]
        if org_only:
            continue
        if not _routes_to_one_user(sql, user_id):
            bad.append(sql)
    return bad


@pytest.mark.django_db
def test_agent_paths_filter_every_per_user_statement_by_the_user(api, scripted, org):
    """Recall, storing a fact and ending a session (with its extraction) each name the user in every
    statement on a per-user table, so each would route to the one shard holding that user."""
    sid = api.post("/v1/sessions", {"user": "shard-me"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I live in Porto, I use Go."}]})
    session = AgentSession.objects.select_related("user__memory_settings", "org").get(id=sid)
    user = session.user
    scripted.extract_answer = {"facts": [{"text": "The user lives in Porto.", "kind": "profile"}]}
    vector = embeddings.embed("The user writes Go.")  # the model call is not what is being checked

    paths = {}
    with CaptureQueriesContext(connection) as ctx:
        sessions.end_session(session)
    paths["end session"] = ctx.captured_queries
    with CaptureQueriesContext(connection) as ctx:
        extraction.extract_session(session.id, user.id)  # as the worker runs it: the message carries both ids
    paths["extraction"] = ctx.captured_queries
    with CaptureQueriesContext(connection) as ctx, transaction.atomic():
        writing.store(user, "The user writes Go.", "profile", vectors=(vector, None))
    paths["store fact"] = ctx.captured_queries
    fresh = sessions.open_session(org, user)
    fresh = AgentSession.objects.select_related("user__memory_settings", "org").get(id=fresh.id)
    with CaptureQueriesContext(connection) as ctx:
        result = recall.recall(fresh, "Where do I live?")
    paths["recall"] = ctx.captured_queries

    assert "Porto" in result.block and MemoryFact.objects.filter(user=user).count() == 2  # the paths did their work
    offenders = {name: _offenders(queries, user.id) for name, queries in paths.items()}
    for name, queries in paths.items():
        assert any(_TABLE.search(q["sql"]) for q in queries), name
    assert offenders == {name: [] for name in paths}, "statements that would not route to one shard:\n" + "\n".join(
        f"{name}: {sql[:160]}" for name, sqls in offenders.items() for sql in sqls
    )


@pytest.mark.django_db
def test_the_extraction_message_carries_the_user_so_the_worker_routes_to_one_shard(
    org, monkeypatch, django_capture_on_commit_callbacks
):
    """Ending a session queues (session id, user id), and the sweeper's re-enqueue does too."""
    sent = []
    monkeypatch.setattr(tasks.extract_session, "delay", lambda *args: sent.append(args))
    user = sessions.get_or_create_user(org, "shard-queue")
    session = sessions.open_session(org, user)
    sessions.add_turns(session, [("user", "I live in Porto.")])
    with django_capture_on_commit_callbacks(execute=True):
        sessions.end_session(session)
    assert sent == [(str(session.id), user.id)]

    AgentSession.objects.filter(id=session.id).update(next_attempt_at=clock.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["enqueued"] == 1
    assert sent[-1] == (str(session.id), user.id)


def test_the_shard_check_catches_a_statement_by_primary_key_alone():
    """The check above is not vacuous: a fact read by id only, or an insert without user_id, is flagged."""
    queries = [
        {"sql": 'SELECT * FROM "memoryapp_memoryfact" WHERE "memoryapp_memoryfact"."id" = \'abc\'::uuid'},
        {"sql": 'INSERT INTO "memoryapp_factevent" ("fact_id", "action") VALUES (1, 2)'},
        {"sql": 'SELECT 1 FROM "memoryapp_memoryfact" WHERE "memoryapp_memoryfact"."user_id" = 7'},
    ]
    assert len(_offenders(queries, 7)) == 2


@pytest.mark.queue
@pytest.mark.django_db(transaction=True)
def test_four_real_workers_extract_each_session_exactly_once(api, celery_workers):
    """Four workers, twelve sessions of three people ended back to back, and every session's message
    delivered twice: each session is extracted once, and no fact is duplicated."""
    celery_workers(4)
    people = ("ext-a", "ext-b", "ext-c")
    ids = []
    for person in people:
        for _ in range(4):
            sid = api.post("/v1/sessions", {"user": person}).json()["id"]
            api.post(
                f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I use Neovim. I live in Porto."}]}
            )
            ids.append(sid)
    for sid in ids:
        assert api.post(f"/v1/sessions/{sid}/end").status_code == 202
    for n, sid in enumerate(ids):  # a redelivered message (broker retry, sweeper) must not extract twice
        if n % 2:
            sessions.enqueue_extraction(sid, AgentSession.objects.get(id=sid).user_id)
        else:  # a message in the shape queued before it carried the user id
            tasks.extract_session.delay(sid)

    wait_for(
        lambda: all(api.get(f"/v1/sessions/{sid}").json()["extraction_status"] == "done" for sid in ids),
        timeout=180,
        message="twelve extractions to finish",
    )
    time.sleep(1)  # let the redelivered messages reach the workers and be turned away
    for sid in ids:
        assert ExtractionRun.objects.filter(session_id=sid).count() == 1
    for person in people:
        live = sorted(
            MemoryFact.objects.live()
            .filter(user__external_ids__external_id=person)
            .values_list("text", "confirmation_count")
        )
        assert live == [("The user lives in Porto.", 4), ("The user uses Neovim.", 4)]


def _request(method, path, cookies=None):
    request = getattr(RequestFactory(), method.lower())(path)
    request.COOKIES.update(cookies or {})
    return request


def test_pages_read_from_the_replica_and_the_agent_path_and_writes_do_not(settings):
    settings.DATABASES = {**settings.DATABASES, replica.REPLICA: settings.DATABASES["default"]}
    assert replica.use_replica(_request("GET", "/me/"))
    assert replica.use_replica(_request("GET", "/console/facts/1/"))
    assert replica.use_replica(_request("HEAD", "/orgs/acme/"))
    assert not replica.use_replica(_request("POST", "/me/facts/1/delete/"))
    assert not replica.use_replica(_request("GET", "/api/v1/sessions/1"))  # the agent path reads the primary
    assert not replica.use_replica(_request("GET", "/healthz"))


def test_without_a_replica_everything_reads_the_primary(settings):
    assert replica.REPLICA not in settings.DATABASES
    assert not replica.use_replica(_request("GET", "/me/"))


@pytest.mark.django_db(transaction=True)  # no test-wide transaction: the router must see none around the view
def test_the_router_sends_reads_to_the_replica_only_inside_a_replica_safe_request(settings, monkeypatch):
    settings.DATABASES = {**settings.DATABASES, replica.REPLICA: settings.DATABASES["default"]}
    # Routing only: whether a replica answers (and what happens when none does) is tests/test_replica.py's.
    monkeypatch.setattr(replica, "replica_answers", lambda: True)
    router = replica.ReplicaRouter()
    seen = {}

    def view(request):
        seen["read"] = router.db_for_read(MemoryFact)
        seen["write"] = router.db_for_write(MemoryFact)
        with transaction.atomic():
            seen["read_in_transaction"] = router.db_for_read(MemoryFact)
        return HttpResponse("ok")

    middleware = replica.ReplicaMiddleware(view)
    middleware(_request("GET", "/me/"))
    assert seen == {"read": "replica", "write": "default", "read_in_transaction": None}
    assert router.db_for_read(MemoryFact) is None  # outside a request: the primary

    response = middleware(_request("POST", "/me/facts/1/delete/"))
    assert seen["read"] is None
    # After a write the person is pinned to the primary, so their next page shows their own change.
    pinned = {replica.PIN_COOKIE: response.cookies[replica.PIN_COOKIE].value}
    middleware(_request("GET", "/me/", cookies=pinned))
    assert seen["read"] is None


@override_settings(REPLICA_PIN_SECONDS=0)
def test_an_expired_pin_reads_from_the_replica_again(settings):
    settings.DATABASES = {**settings.DATABASES, replica.REPLICA: settings.DATABASES["default"]}
    response = replica.ReplicaMiddleware(lambda r: HttpResponse("ok"))(_request("POST", "/me/settings/"))
    expired = {replica.PIN_COOKIE: response.cookies[replica.PIN_COOKIE].value}
    time.sleep(0.01)
    assert replica.use_replica(_request("GET", "/me/", cookies=expired))
