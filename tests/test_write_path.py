"""Issue 14: no transaction is open and no lock is held while a model is called.

Threads with their own database connections, so the tests use real commits (transactional_db):
pytest-django's plain `db` fixture would wrap everything in one transaction and make the
"not inside a transaction" checks meaningless.
"""

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

import httpx2
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client, override_settings

from memoryapp import backends, extraction, orgs, sessions, writing
from memoryapp.backends.base import EXTRACT_SYSTEM, VERDICT_PROMPT_VERSION, VERDICT_SYSTEM
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, MemoryFact, OrgFactProposal
from tests.conftest import BASE_DIR, REDIS_TEST_URL, anthropic_reply, in_thread

pytestmark = pytest.mark.django_db(transaction=True)

VIM = "The user's code editor is Vim."
EMACS = "The user's code editor is Emacs."
HELIX = "The user's code editor is Helix."


def ended_session(org, external_id, said):
    person = sessions.get_or_create_user(org, external_id)
    session = sessions.open_session(org, person)
    sessions.add_turns(session, [("user", said)])
    sessions.end_session(session)
    return person, session


# --- a fake Anthropic Messages endpoint, through the real SDK -------------------------------------


class FakeAnthropic:
    """Answers /v1/messages like the API; the first verdict call can be held until the test releases it."""

    def __init__(self, facts, verdict="CONTRADICTS"):
        self.facts = facts
        self.verdict = verdict
        self.hold_verdict = False
        self.in_verdict = threading.Event()
        self.release = threading.Event()
        self.calls = []  # (kind, in_atomic_block) per request

    def __call__(self, request):
        body = json.loads(request.content)
        system = body["system"][0]["text"]
        kind = "verdict" if system == VERDICT_SYSTEM else "extract" if system == EXTRACT_SYSTEM else "other"
        self.calls.append((kind, connection.in_atomic_block))
        if kind == "verdict":
            if self.hold_verdict:
                self.hold_verdict = False
                self.in_verdict.set()
                assert self.release.wait(30)
            listing = body["messages"][0]["content"].split("EXISTING facts:\n", 1)[1]
            answer = {"verdicts": [self.verdict] * len(listing.strip().splitlines())}
        else:
            answer = {"facts": [{"text": t, "kind": "profile"} for t in self.facts]}
        return httpx2.Response(200, json=anthropic_reply(json.dumps(answer), input_tokens=40, output_tokens=10))


@pytest.fixture
def anthropic(settings):
    """Point the anthropic backend (real SDK) at a FakeAnthropic; returns a function that installs one."""

    def install(fake):
        settings.ANTHROPIC_API_KEY, settings.EXTRACTION_BACKEND, settings.ANTHROPIC_MAX_RETRIES = (
            "sk-test",
            "anthropic",
            0,
        )
        settings.ANTHROPIC_HTTP_CLIENT = httpx2.Client(transport=httpx2.MockTransport(fake))
        return fake

    return install


def test_a_correction_on_my_page_while_the_verdict_call_is_in_flight_is_immediate_and_stands(org, anthropic):
    fake = anthropic(FakeAnthropic([VIM]))
    person, first = ended_session(org, "ines", "I use Vim.")
    extraction.extract_session(first.id)
    vim = MemoryFact.objects.get(text=VIM)

    fake.facts, fake.hold_verdict = [EMACS], True
    _, second = ended_session(org, "ines", "I moved to Emacs.")
    results = {}
    worker = in_thread(lambda: extraction.extract_session(second.id), results, "run")
    try:
        assert fake.in_verdict.wait(20)  # the extraction is waiting on the verdict model
        browser = Client()
        browser.force_login(person)
        started = time.monotonic()
        response = browser.post(f"/me/facts/{vim.id}/correct/", {"text": HELIX, "kind": "profile"})
        took = time.monotonic() - started
    finally:
        fake.release.set()
        worker.join(30)

    assert response.status_code == 302, response.content
    assert took < 3, f"the correction waited {took:.1f}s for the model"
    vim.refresh_from_db()
    helix = MemoryFact.objects.get(text=HELIX)
    assert vim.superseded_by_id == helix.id  # the person's correction went through...
    assert helix.superseded_at is None and helix.origin == "user"  # ...and was not clobbered afterwards
    run = results["run"]
    assert isinstance(run, ExtractionRun) and run.status == "succeeded", run
    # The verdict judged Vim, which had changed by the time it came back: the extraction judged
    # again against the person's version (which holds) instead of applying a stale verdict.
    assert [k for k, _ in fake.calls].count("verdict") == 2 and run.verdict_calls == 2
    assert not MemoryFact.objects.filter(text=EMACS, superseded_at__isnull=True).exists()
    assert [f.text for f in MemoryFact.objects.for_user(person).live()] == [HELIX]


# --- the tripwire: the model edge fails if it is reached inside a transaction ----------------------


class Tripwire(backends.ScriptedBackend):
    """Scripted answers, but every model call records whether a transaction was open at the time."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = []

    def extract(self, text):
        self.calls.append(("extract", connection.in_atomic_block))
        return super().extract(text)

    def verdicts(self, new_text, old_texts):
        self.calls.append(("verdicts", connection.in_atomic_block))
        return super().verdicts(new_text, old_texts)


def test_no_model_call_happens_inside_a_transaction_during_extraction_with_supersession(org):
    assert not connection.in_atomic_block  # otherwise the check below could not fail
    porto_text = "The user lives in Porto."
    tripwire = Tripwire(
        extract={"facts": [{"text": EMACS, "kind": "profile"}, {"text": porto_text, "kind": "profile"}]},
        verdicts={"vim": "CONTRADICTS", "porto": "DUPLICATE"},
    )
    person = sessions.get_or_create_user(org, "tom")
    vim = writing.store(person, VIM, "profile", judge=tripwire.verdicts).fact
    porto = writing.store(person, porto_text, "profile", judge=tripwire.verdicts).fact
    with override_settings(EXTRACTION_BACKEND=tripwire):
        _, session = ended_session(org, "tom", "I switched to Emacs. Still in Porto.")
        run = extraction.extract_session(session.id)

    assert run.status == "succeeded"
    vim.refresh_from_db()
    porto.refresh_from_db()
    assert vim.superseded_by.text == EMACS and porto.confirmation_count == 2  # the whole write path ran
    kinds = [k for k, _ in tripwire.calls]
    assert "extract" in kinds and kinds.count("verdicts") >= 2
    assert [c for c in tripwire.calls if c[1]] == [], f"model calls inside a transaction: {tripwire.calls}"


def test_no_sdk_request_is_sent_inside_a_transaction(org, anthropic):
    fake = anthropic(FakeAnthropic([VIM]))
    _, first = ended_session(org, "uri", "I use Vim.")
    extraction.extract_session(first.id)
    fake.facts = [EMACS]
    _, second = ended_session(org, "uri", "I moved to Emacs.")
    run = extraction.extract_session(second.id)

    assert run.status == "succeeded" and MemoryFact.objects.get(text=VIM).superseded_at is not None
    assert [k for k, _ in fake.calls] == ["extract", "extract", "verdict"]
    assert [c for c in fake.calls if c[1]] == [], f"HTTP requests inside a transaction: {fake.calls}"


def test_approving_an_org_proposal_calls_the_verdict_model_outside_any_transaction(org, make_user):
    admin = make_user("olga", org=org, role="admin")
    tripwire = Tripwire(verdicts={"fridays": "CONTRADICTS"})
    old = orgs.add_fact(org, admin, "The team deploys on Fridays.", "constraint")
    old = old.fact
    proposal = OrgFactProposal.objects.create(
        org=org, proposed_by=admin, text="The team deploys on Thursdays.", kind="constraint"
    )
    with override_settings(EXTRACTION_BACKEND=tripwire):
        result = orgs.approve_proposal(proposal, admin)

    proposal.refresh_from_db()
    old.refresh_from_db()
    assert proposal.status == "approved" and proposal.fact_id == result.fact.id
    assert old.superseded_by_id == result.fact.id
    assert tripwire.calls == [("verdicts", False)]
    with pytest.raises(orgs.OrgError):
        orgs.approve_proposal(proposal, admin)  # decided once


# --- claims, leases and killed workers ----------------------------------------------------------


class Held(backends.ScriptedBackend):
    """The extraction call waits until the test releases it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.called = threading.Event()
        self.release = threading.Event()

    def extract(self, text):
        self.called.set()
        assert self.release.wait(30)
        return super().extract(text)


class WorkerKilled(BaseException):
    """Stands in for SIGKILL: nothing in the extraction code catches it, so nothing is cleaned up."""


class DiesInTheCall(backends.ScriptedBackend):
    def extract(self, text):
        raise WorkerKilled()


def test_a_worker_killed_in_the_model_call_leaves_a_visible_run_and_the_sweeper_recovers_once(org, travel):
    person, session = ended_session(org, "kim", "I drink green tea.")
    with override_settings(EXTRACTION_BACKEND=DiesInTheCall()), pytest.raises(WorkerKilled):
        extraction.extract_session(session.id)

    # Staff see the attempt: recorded, committed, before the call.
    run = ExtractionRun.objects.get(session=session)
    assert (run.status, run.backend, run.verdict_prompt_version) == ("running", "scripted", VERDICT_PROMPT_VERSION)
    assert len(run.input_hash) == 64
    staff = Client()
    staff.force_login(person.__class__.objects.create_user("sam", password="x", is_staff=True))
    page = staff.get(f"/console/runs/{run.id}/").content.decode()
    assert '<span class="badge running">running</span>' in page and "the model has not answered" in page

    tea = {"facts": [{"text": "The user drinks green tea.", "kind": "preference"}]}
    with override_settings(EXTRACTION_BACKEND=backends.ScriptedBackend(extract=tea)):
        # The task comes back while the lease still runs: the claim holds, nothing happens twice.
        assert extraction.extract_session(session.id) is None
        assert sessions.sweep()["enqueued"] == 0
        travel(django_settings.EXTRACTION_LEASE + timedelta(seconds=1))
        assert sessions.sweep()["enqueued"] == 1  # the lease ran out: taken over
        run.refresh_from_db()
        assert run.status == "abandoned" and run.finished_at is not None
        page = staff.get(f"/console/runs/{run.id}/").content.decode()
        assert '<span class="badge abandoned">abandoned</span>' in page and "its lease ran out" in page
        again = extraction.extract_session(session.id)

    assert again.status == "succeeded"
    assert list(MemoryFact.objects.values_list("text", flat=True)) == ["The user drinks green tea."]
    assert sorted(ExtractionRun.objects.values_list("status", flat=True)) == ["abandoned", "succeeded"]
    assert AgentSession.objects.get(id=session.id).extraction_status == "done"


def test_two_workers_on_one_session_extract_it_once(org):
    model = Held(extract={"facts": [{"text": "The user drinks green tea.", "kind": "preference"}]})
    _, session = ended_session(org, "lea", "I drink green tea.")
    results = {}
    with override_settings(EXTRACTION_BACKEND=model):
        first = in_thread(lambda: extraction.extract_session(session.id), results, "first")
        assert model.called.wait(20)
        assert extraction.extract_session(session.id) is None  # the second delivery: claim refused at once
        model.release.set()
        first.join(30)

    assert results["first"].status == "succeeded"
    assert len(model.seen_inputs) == 1
    assert MemoryFact.objects.count() == 1 and ExtractionRun.objects.count() == 1


def test_a_worker_whose_lease_ran_out_cannot_write_after_the_takeover(org, travel):
    tea = {"facts": [{"text": "The user drinks green tea.", "kind": "preference"}]}
    slow = Held(extract=tea)
    _, session = ended_session(org, "max", "I drink green tea.")
    results = {}
    with override_settings(EXTRACTION_BACKEND=slow):
        stalled = in_thread(lambda: extraction.extract_session(session.id), results, "stalled")
        assert slow.called.wait(20)
        travel(django_settings.EXTRACTION_LEASE + timedelta(seconds=1))
        with override_settings(EXTRACTION_BACKEND=backends.ScriptedBackend(extract=tea)):
            taken = extraction.extract_session(session.id)  # a redelivery after the lease ran out
        slow.release.set()
        stalled.join(30)

    assert taken.status == "succeeded"
    assert results["stalled"] is None  # it found its claim gone and wrote nothing
    fact = MemoryFact.objects.get()
    assert fact.confirmation_count == 1 and fact.extraction_run_id == taken.id
    assert sorted(ExtractionRun.objects.values_list("status", flat=True)) == ["abandoned", "succeeded"]


# --- re-judging when the neighbours change under the verdict ------------------------------------------


def test_judging_is_bounded_when_the_neighbours_keep_changing_and_nothing_is_lost(org):
    person = sessions.get_or_create_user(org, "ned")
    scripted = backends.ScriptedBackend(verdicts={"editor": "CONTRADICTS"})
    writing.store(person, VIM, "profile", judge=scripted.verdicts)
    editors = ["Nano", "Kakoune", "Micro", "Joe", "Zed", "Pico", "Kate", "Geany", "Jed", "Mg", "Ne", "Vis", "Lite"]
    others = editors[: writing.JUDGE_ATTEMPTS - 1]
    versions = iter([f"The user's code editor is {name}." for name in others] + [HELIX, "x"])
    judged = []

    def judge_while_the_person_keeps_correcting(new_text, old_texts):
        judged.append(list(old_texts))
        current = MemoryFact.objects.for_user(person).live().get()
        writing.correct_fact(current, next(versions), "profile", actor_user=person)
        return scripted.verdicts(new_text, old_texts)

    result = writing.store(person, EMACS, "profile", judge=judge_while_the_person_keeps_correcting)

    assert result.judge_calls == writing.JUDGE_ATTEMPTS == len(judged)
    assert result.outcome == "created" and result.superseded == []  # inserted, superseding nothing
    live = sorted(MemoryFact.objects.for_user(person).live().values_list("text", flat=True))
    assert live == sorted([EMACS, HELIX])  # the person's latest correction stands beside it
    assert FactEvent.objects.filter(action="superseded", actor="extractor").count() == 0
    created = FactEvent.objects.get(fact_id=result.fact.id, action="created")
    assert f"kept unjudged: its neighbours changed {writing.JUDGE_ATTEMPTS} times" in created.reason


def test_the_broker_redelivers_a_dead_workers_task_after_its_lease_not_after_an_hour():
    """A configuration check (plumbing, not behaviour): Redis's visibility timeout fits the lease."""
    # A fresh process configured for Redis, as a production worker is.
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "from memoryapp.celery import app; print(json.dumps([app.conf.broker_transport_options, "
        "s.EXTRACTION_LEASE.total_seconds()]))"
    )
    env = {**os.environ, "CELERY_BROKER_URL": REDIS_TEST_URL, "DJANGO_SETTINGS_MODULE": "memoryapp.settings"}
    run = subprocess.run([sys.executable, "-c", script], cwd=BASE_DIR, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    options, lease = json.loads(run.stdout.strip().splitlines()[-1])
    # Redelivery comes after the lease has run out (renewed by the task's heartbeat while it works), so
    # the redelivered task can take the session over, and well inside the one-hour default under which
    # a dead worker's task was never redelivered in practice.
    assert lease < options["visibility_timeout"] < 3600


def test_a_restated_fact_is_never_confirmed_onto_a_row_forgetting_expired_a_moment_earlier(org, monkeypatch):
    # Issue 42 part 6: forgetting expires rows without the user's lock, so a row can stop being live
    # between the neighbour re-check and the confirmation. The restatement must not vanish into it.
    person = sessions.get_or_create_user(org, "alice")
    old = writing.store(person, VIM, "profile", judge=backends.ScriptedBackend().verdicts).fact
    real_same = writing._same_neighbours

    def same_then_forgotten(a, b):
        same = real_same(a, b)
        MemoryFact.objects.filter(id=old.id).update(expired_at=old.created_at, expired_rule="never_recalled")
        return same

    monkeypatch.setattr(writing, "_same_neighbours", same_then_forgotten)
    result = writing.store(person, VIM, "profile", judge=lambda text, olds: (["DUPLICATE"] * len(olds), None))
    assert result.outcome == "created", "the restatement is stored, not counted onto a forgotten row"
    assert list(MemoryFact.objects.for_user(person).live().values_list("text", flat=True)) == [VIM]
    assert not FactEvent.objects.filter(fact_id=old.id, action="confirmed").exists()
