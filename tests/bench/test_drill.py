"""The drills at smoke size: the shipped server (uvicorn, 2 workers) and a Celery worker on a private
Redis queue, traffic that stops by itself, and an audit of what the API acknowledged."""

import io
import json

import pytest
from django.core.management import call_command

from memoryapp.models import Organization
from tests.conftest import REDIS_TEST_URL, _redis_or_fail

pytestmark = [pytest.mark.queue, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def drill(name, tmp_path):
    _redis_or_fail()
    out = tmp_path / f"{name}.json"
    call_command("drill", name, "--smoke", "--broker", REDIS_TEST_URL, "--json", str(out), stdout=io.StringIO())
    return json.loads(out.read_text())


def test_load_drill_loses_nothing_and_answers_no_5xx(tmp_path):
    report = drill("load", tmp_path)
    assert report["ok"] is True and report["db_pool"] is True
    # Every acknowledged session, turn, end and remembered fact is in the database, and every ended
    # session was extracted by the worker.
    assert report["sessions_acknowledged"] == report["sessions_stored"] == 6
    assert report["facts_acknowledged"] == report["facts_stored"] > 0
    assert report["turns_acknowledged"] == 6 * 4 and report["turns_missing"] == 0
    assert report["ends_acknowledged"] == 6 and report["ended_sessions_not_extracted"] == 0 and report["lost"] == 0
    assert report["valid"]["server_errors_5xx"] == 0 and report["valid"]["transport_errors"] == 0
    assert report["valid"]["calls"] == 6 * 5 and report["valid"]["p50_ms"] <= report["valid"]["p95_ms"]
    # The sampler saw the server's connections, far under PostgreSQL's limit, and the log no refusal.
    connections = report["connections"]
    assert 0 < connections["peak_client_connections"] < connections["max_connections"]
    assert report["too_many_clients_in_log"] == 0 and report["tracebacks_in_log"] == 0
    assert not Organization.objects.filter(slug__startswith="drill-").exists()  # it cleans up after itself


def test_flood_of_made_up_keys_and_oversized_bodies_leaves_valid_agents_whole(tmp_path):
    report = drill("flood", tmp_path)
    assert report["ok"] is True and report["lost"] == 0
    assert report["valid"]["server_errors_5xx"] == 0 and report["valid_quiet"]["server_errors_5xx"] == 0
    assert report["valid"]["p95_ms"] < 10 * report["valid_quiet"]["p95_ms"]
    # The attackers were refused with 4xx (no key matches; a body over the limit is too large), never served.
    attacks = report["attacks"]["statuses"]
    assert sum(attacks.values()) > 0 and set(attacks) <= {"401", "413"}, attacks
    assert report["too_many_clients_in_log"] == 0
    assert not Organization.objects.filter(slug__startswith="drill-").exists()


def test_provider_down_for_verdicts_answers_no_5xx_and_labels_the_offline_fallback(tmp_path):
    # The fake provider answers 500 to every verdict call while 2 agents remember facts next to their own
    # earlier ones: each remember still succeeds in time, judged offline, and says so in its audit trail.
    report = drill("provider-down", tmp_path)
    assert report["valid"]["server_errors_5xx"] == 0 and report["valid"]["transport_errors"] == 0
    assert report["provider_calls"].get("verdict_down", 0) > 0
    assert report["facts_acknowledged"] == report["facts_stored"] == 4
    assert report["facts_judged_offline"] > 0
    # That each waits at most one bounded attempt is tests/test_request_model.py's; the wall-clock bound is the
    # full drill's (`manage.py drill provider-down`), not a smoke's on a busy CI machine.
    # After it recovers, every ended session is extracted exactly once.
    assert report["ended_sessions_extracted_once"] == report["ends_acknowledged"] == 4
    assert report["ok"] is True


@pytest.mark.django_db
def test_the_audit_tells_retention_from_a_lost_turn(org, make_user):
    # A session that taught nothing keeps no turns once extracted (retention): its turn count still
    # proves they were stored, so it is not "lost". Turns acknowledged but absent elsewhere are.
    from bench.drill import Acknowledged, audit
    from memoryapp import sessions
    from memoryapp.models import AgentSession

    user = make_user("drill-audit", org)
    emptied, open_one = sessions.open_session(org, user), sessions.open_session(org, user)
    for s in (emptied, open_one):
        sessions.add_turns(s, [("user", "Hello."), ("assistant", "Hi.")])
    emptied.turns.all().delete()
    AgentSession.objects.filter(id=emptied.id).update(extraction_status=AgentSession.Extraction.DONE)
    acked = Acknowledged()
    for s in (emptied, open_one):
        acked.note("session", s.id)
        acked.note("turns", s.id, 2)
    assert audit(acked)["turns_missing"] == 0 and audit(acked)["sessions_emptied_by_retention"] == 1

    open_one.turns.filter(ordinal=2).delete()  # an acknowledged turn gone from a session still open
    report = audit(acked)
    assert report["turns_missing"] == 1 and report["lost"] == 1
