"""The agent API's session endpoints: auth, tenancy, the error shape, and what a batch stores."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memoryapp import sessions, writing
from memoryapp.models import AgentSession, ApiKey, MemoryFact, Turn
from tests.conftest import Api

pytestmark = pytest.mark.django_db


def _error(response, status):
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}
    assert body["error"]["message"]
    return body["error"]


def _open(api, user="ext-1", **extra):
    response = api.post("/v1/sessions", {"user": user, **extra})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _turns(*pairs):
    return {"turns": [{"role": r, "content": c} for r, c in pairs]}


# --- authentication and tenancy --------------------------------------------------------


@pytest.mark.parametrize("key", [None, "mem_not-a-real-key", "x" * 500])
def test_missing_or_unknown_key_is_401_json(org, key):
    _error(Api(key).post("/v1/sessions", {"user": "ext-1"}), 401)
    _error(Api(key).get("/v1/sessions/00000000-0000-0000-0000-000000000000"), 401)


def test_revoked_key_is_401(org):
    api_key, key = sessions.create_api_key(org, "bot")
    assert Api(key).post("/v1/sessions", {"user": "ext-1"}).status_code == 201
    ApiKey.objects.filter(id=api_key.id).update(revoked_at=api_key.created_at)
    assert _error(Api(key).post("/v1/sessions", {"user": "ext-1"}), 401)["code"] == "unauthorized"


def test_another_tenants_session_is_404_everywhere(api, other_org):
    _, other_key = sessions.create_api_key(other_org, "theirs")
    theirs = Api(other_key)
    sid = _open(theirs, "ext-1")
    assert _error(api.get(f"/v1/sessions/{sid}"), 404)["code"] == "not_found"
    _error(api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "hello"))), 404)
    _error(api.post(f"/v1/sessions/{sid}/end"), 404)
    assert AgentSession.objects.get(id=sid).ended_at is None and not Turn.objects.exists()


def test_same_external_id_in_two_orgs_is_two_people(api, other_org):
    _, other_key = sessions.create_api_key(other_org, "theirs")
    mine, theirs = _open(api, "ext-1"), _open(Api(other_key), "ext-1")
    assert AgentSession.objects.get(id=mine).user_id != AgentSession.objects.get(id=theirs).user_id


# --- creating sessions ----------------------------------------------------------------


def test_create_session_shape_and_default_memory(api):
    body = api.post("/v1/sessions", {"user": "ext-1"}).json()
    assert set(body) == {"id", "user", "memory", "started_at"}
    assert body["user"] == "ext-1" and body["memory"] == "on"
    assert _open(api, "ext-1", memory="off") != body["id"]
    assert api.post("/v1/sessions", {"user": "ext-1", "memory": "off"}).json()["memory"] == "off"


def test_switch_off_forces_memory_off(api, org):
    user = sessions.get_or_create_user(org, "ext-quiet")
    writing.set_memory_switch(user, False)
    assert api.post("/v1/sessions", {"user": "ext-quiet", "memory": "on"}).json()["memory"] == "off"


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"user": ""}, "user"),
        ({"user": "x" * 129}, "user"),
        ({"user": "a\x00b"}, "user"),
        ({}, "user"),
        ({"user": "ext-1", "memory": "maybe"}, "memory"),
    ],
)
def test_bad_session_input_is_422_naming_the_field(api, payload, field):
    assert _error(api.post("/v1/sessions", payload), 422)["field"] == field


def test_an_id_of_the_wrong_form_is_refused_in_words_not_with_the_pattern(api):
    error = _error(api.post("/v1/sessions", {"user": "a/b"}), 422)
    assert error["message"] == (
        "user: an id is 1 to 128 characters, without control or invisible characters or '/', and not '.' or '..'"
    )


# --- turns --------------------------------------------------------------------------


def test_turns_are_stored_in_order_and_bump_activity(api):
    sid = _open(api)
    before = AgentSession.objects.get(id=sid).last_activity_at
    response = api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "one"), ("assistant", "two"), ("tool", "three")))
    assert response.status_code == 202 and response.json() == {"accepted": 3, "replayed": False}
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "four")))
    assert list(Turn.objects.filter(session_id=sid).values_list("ordinal", "role", "content")) == [
        (1, "user", "one"),
        (2, "assistant", "two"),
        (3, "tool", "three"),
        (4, "user", "four"),
    ]
    session = AgentSession.objects.get(id=sid)
    assert session.turn_count == 4 and session.last_activity_at >= before


def test_a_batch_retried_with_its_idempotency_key_is_stored_once(api):
    sid = _open(api)
    batch = _turns(("user", "I moved to Lisbon."), ("assistant", "Noted."))
    first = api.post(f"/v1/sessions/{sid}/turns", batch, headers={"Idempotency-Key": "batch-1"})
    # The agent never saw that answer (a timeout) and sends the same call again.
    again = api.post(f"/v1/sessions/{sid}/turns", batch, headers={"Idempotency-Key": "batch-1"})
    assert first.json() == {"accepted": 2, "replayed": False} and again.status_code == 202
    assert again.json() == {"accepted": 2, "replayed": True}
    # The same key with other turns is refused, whole; a new key appends; no key always appends.
    other = api.post(
        f"/v1/sessions/{sid}/turns", _turns(("user", "And a cat.")), headers={"Idempotency-Key": "batch-1"}
    )
    assert _error(other, 422)["code"] == "idempotency_key_reused"
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "I have a cat.")), headers={"Idempotency-Key": "batch-2"})
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "Hi.")))
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "Hi.")))
    contents = list(Turn.objects.filter(session_id=sid).order_by("ordinal").values_list("content", flat=True))
    assert contents == ["I moved to Lisbon.", "Noted.", "I have a cat.", "Hi.", "Hi."]
    assert AgentSession.objects.get(id=sid).turn_count == 5


def test_a_batch_retried_after_a_later_one_is_still_stored_once(api):
    sid = _open(api)
    first, second = _turns(("user", "I moved to Lisbon.")), _turns(("user", "I adopted a cat."))
    api.post(f"/v1/sessions/{sid}/turns", first, headers={"Idempotency-Key": "k1"})
    api.post(f"/v1/sessions/{sid}/turns", second, headers={"Idempotency-Key": "k2"})  # sent while k1's answer was lost
    assert api.post(f"/v1/sessions/{sid}/turns", first, headers={"Idempotency-Key": "k1"}).json()["replayed"] is True
    for i in range(sessions.KEPT_BATCHES):  # a session keeps its last few keys, not every key forever
        api.post(f"/v1/sessions/{sid}/turns", _turns(("user", f"Note {i}.")), headers={"Idempotency-Key": f"n{i}"})
    assert api.post(f"/v1/sessions/{sid}/turns", first, headers={"Idempotency-Key": "k1"}).json()["replayed"] is False
    assert Turn.objects.filter(session_id=sid, content="I moved to Lisbon.").count() == 2


def test_a_retry_after_the_session_ended_is_answered_not_refused(api):
    sid = _open(api)
    batch = _turns(("user", "I am vegetarian."))
    api.post(f"/v1/sessions/{sid}/turns", batch, headers={"Idempotency-Key": "k"})
    api.post(f"/v1/sessions/{sid}/end")
    assert api.post(f"/v1/sessions/{sid}/turns", batch, headers={"Idempotency-Key": "k"}).json()["replayed"] is True
    assert _error(api.post(f"/v1/sessions/{sid}/turns", batch, headers={"Idempotency-Key": "k2"}), 409)
    assert Turn.objects.filter(session_id=sid).count() == 1


@pytest.mark.parametrize("key", ["x" * 256, "has space", "naïve"])
def test_a_malformed_idempotency_key_is_422(api, key):
    sid = _open(api)
    response = api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "hi")), headers={"Idempotency-Key": key})
    assert response.status_code == 422, response.content
    assert not Turn.objects.filter(session_id=sid).exists()


def test_malformed_json_is_400(api):
    sid = _open(api)
    err = _error(api.post(f"/v1/sessions/{sid}/turns", raw='{"turns": [{"role": "user", "content": "hi"'), 400)
    assert err["code"] == "malformed_json"
    _error(api.post("/v1/sessions", raw="not json"), 400)


@pytest.mark.parametrize(
    "turns, status, code, field",
    [
        ([("user", "fine"), ("user", "   ")], 422, "empty_turn", "turns.1.content"),
        ([("user", "\u200b\u2060")], 422, "empty_turn", "turns.0.content"),  # nothing to see either
        ([("user", "x" * (32 * 1024 + 1))], 413, "turn_too_large", "turns.0.content"),
        ([("user", "é" * (16 * 1024 + 1))], 413, "turn_too_large", "turns.0.content"),  # bytes, not characters
        ([("user", "ok"), ("robot", "beep")], 422, "invalid", "turns.1.role"),
        ([("user", "ok")] * 101, 413, "too_many_turns", "turns"),
        ([], 422, "invalid", "turns"),
    ],
)
def test_bad_batch_is_rejected_whole(api, turns, status, code, field):
    sid = _open(api)
    err = _error(api.post(f"/v1/sessions/{sid}/turns", _turns(*turns)), status)
    assert (err["code"], err["field"]) == (code, field)
    assert field in err["message"] or field == "turns"
    assert not Turn.objects.filter(session_id=sid).exists()  # nothing half-stored
    assert AgentSession.objects.get(id=sid).turn_count == 0


def test_turn_of_exactly_the_limit_is_accepted(api):
    sid = _open(api)
    assert api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "x" * 32 * 1024))).status_code == 202


def test_body_over_the_request_limit_is_413_not_500(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    sid = _open(api)
    body = json.dumps(_turns(*[("user", "y" * 30_000)] * 3))
    err = _error(api.post(f"/v1/sessions/{sid}/turns", raw=body), 413)
    assert err["code"] == "body_too_large"
    assert not Turn.objects.filter(session_id=sid).exists()


def test_session_turn_limit_is_409_free_and_whole(api, settings):
    settings.MEMORY = {**settings.MEMORY, "MAX_TURNS_PER_SESSION": 3}
    sid = _open(api)
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "a"), ("user", "b")))
    _error(api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "c"), ("user", "d"))), 413)
    assert Turn.objects.filter(session_id=sid).count() == 2


def test_adding_to_an_ended_session_is_409(api):
    sid = _open(api)
    api.post(f"/v1/sessions/{sid}/end")
    assert _error(api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "late"))), 409)["code"] == "session_ended"


# --- ending and status ------------------------------------------------------------------


def test_end_queues_extraction_on_commit_and_never_runs_it_inline(api, scripted, django_capture_on_commit_callbacks):
    scripted.extract_answer = {"facts": [{"text": "The user's editor is Neovim.", "kind": "profile"}]}
    sid = _open(api)
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "My editor is Neovim.")))
    with django_capture_on_commit_callbacks() as callbacks:
        response = api.post(f"/v1/sessions/{sid}/end")
    assert response.status_code == 202 and response.json() == {"status": "queued"}
    assert len(callbacks) == 1  # one enqueue, after the commit
    assert scripted.seen_inputs == [] and not MemoryFact.objects.exists()
    session = AgentSession.objects.get(id=sid)
    assert session.end_reason == "explicit" and session.extraction_status == "queued"


def test_ending_twice_is_harmless(api, django_capture_on_commit_callbacks):
    sid = _open(api)
    with django_capture_on_commit_callbacks() as callbacks:
        first = api.post(f"/v1/sessions/{sid}/end")
        ended_at = AgentSession.objects.get(id=sid).ended_at
        second = api.post(f"/v1/sessions/{sid}/end")
    assert first.status_code == second.status_code == 202
    assert second.json() == {"status": "queued"}
    assert len(callbacks) == 1 and AgentSession.objects.get(id=sid).ended_at == ended_at


def test_memory_off_session_end_deletes_turns_and_skips(api, scripted):
    sid = _open(api, memory="off")
    api.post(f"/v1/sessions/{sid}/turns", _turns(("user", "I'm a dentist.")))
    assert api.post(f"/v1/sessions/{sid}/end").json() == {"status": "skipped"}
    assert not Turn.objects.filter(session_id=sid).exists()
    status = api.get(f"/v1/sessions/{sid}").json()
    assert (status["memory"], status["extraction_status"], status["facts_written"]) == ("off", "skipped", [])


def test_status_lists_facts_written_confirmed_and_superseded(api, scripted):
    from memoryapp import extraction

    scripted.extract_answer = {
        "facts": [
            {"text": "The user's database is PostgreSQL.", "kind": "profile"},
            {"text": "The user prefers short answers.", "kind": "preference"},
        ]
    }
    first = _open(api)
    api.post(f"/v1/sessions/{first}/turns", _turns(("user", "We're on Postgres; keep answers short.")))
    api.post(f"/v1/sessions/{first}/end")
    extraction.extract_session(first)
    old_db = MemoryFact.objects.get(text__contains="PostgreSQL")
    short = MemoryFact.objects.get(text__contains="short")

    scripted.extract_answer = {
        "facts": [
            {"text": "The user's database is PlanetScale.", "kind": "profile"},
            {"text": "The user likes short answers.", "kind": "preference"},
        ]
    }
    scripted.verdict_map = {"postgresql": "CONTRADICTS", "short answers": "DUPLICATE"}
    second = _open(api)
    api.post(f"/v1/sessions/{second}/turns", _turns(("user", "We moved to PlanetScale. Short answers please.")))
    api.post(f"/v1/sessions/{second}/end")
    extraction.extract_session(second)
    new_db = MemoryFact.objects.get(text__contains="PlanetScale")

    status = api.get(f"/v1/sessions/{second}").json()
    assert status["ended"] is True and status["end_reason"] == "explicit"
    assert status["extraction_status"] == "done" and status["memory"] == "on" and status["user"] == "ext-1"
    assert status["facts_written"] == [str(new_db.id)]
    assert status["facts_confirmed"] == [str(short.id)]
    assert status["facts_superseded"] == [str(old_db.id)] and status["facts_pending"] == []
    assert sorted(api.get(f"/v1/sessions/{first}").json()["facts_written"]) == sorted([str(old_db.id), str(short.id)])


def test_open_session_status(api):
    sid = _open(api)
    status = api.get(f"/v1/sessions/{sid}").json()
    assert status["ended"] is False and status["end_reason"] is None and status["extraction_status"] == "pending"


def test_openapi_schema_lists_the_session_endpoints(api):
    schema = api.client.get("/api/openapi.json").json()
    assert {"/api/v1/sessions", "/api/v1/sessions/{session_id}/turns", "/api/v1/sessions/{session_id}/end"} <= set(
        schema["paths"]
    )


# --- the create_api_key command -----------------------------------------------------------


def test_create_api_key_command_prints_a_working_key_once(org):
    out = StringIO()
    call_command("create_api_key", "--org", "acme", "--name", "support bot", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert key.startswith("mem_")
    stored = ApiKey.objects.get(org=org, name="support bot")
    assert key not in (stored.key_hash, stored.prefix)  # only a hash is kept
    assert Api(key).post("/v1/sessions", {"user": "ext-1"}).status_code == 201


def test_create_api_key_command_unknown_org_is_a_clear_error(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No organisation"):
        call_command("create_api_key", "--org", "nope", "--name", "x", stdout=StringIO())


def test_create_api_key_command_can_make_a_read_only_key(org):
    out = StringIO()
    call_command("create_api_key", "--org", "acme", "--name", "dashboard", "--scopes", "read", stdout=out)
    key = out.getvalue().strip().splitlines()[-1]
    assert sessions.authenticate_key(key).scopes == ["read"] and "may read" in out.getvalue()
    with pytest.raises(CommandError, match="--scopes"):
        call_command("create_api_key", "--org", "acme", "--name", "x", "--scopes", "read,root", stdout=StringIO())
