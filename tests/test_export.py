"""The export document: everything held about a person, and nothing about anyone else."""

import json
from datetime import timedelta

import pytest

from memoryapp import clock, export, support_access, writing
from memoryapp.models import FactEvent, MemoryFact
from tests.pages.test_account_pages import live_fact, seed_memory


@pytest.fixture
def alice(org, make_user):
    return make_user("alice", org=org)


def test_export_holds_every_fact_state_with_provenance_sessions_turns_recalls_switch_and_access(
    org, alice, make_user, scripted, travel
):
    seeded = seed_memory(org, alice, scripted, travel)
    goal = live_fact(alice, "conference talk")
    MemoryFact.objects.filter(id=goal.id).update(expired_at=clock.now(), expired_rule="stale_goal")
    staff = make_user("sam", is_staff=True)
    support_access.record(staff, alice, "/console/users/alice/facts")
    writing.set_memory_switch(alice, False)
    travel(timedelta(minutes=1))

    doc = export.export_user(alice)
    json.dumps(doc)  # a plain JSON document
    assert doc["schema_version"] == export.SCHEMA_VERSION
    states = {f["text"]: f for f in doc["facts"]}
    assert states["The user's main database is PostgreSQL."]["state"] == "superseded"
    assert states["The user's main database is PostgreSQL."]["superseded_by"] == str(live_fact(alice, "PlanetScale").id)
    assert states["The user is preparing a conference talk on connection pooling."]["state"] == "expired"
    assert states["The user wants to learn Rust this year."]["state"] == "live"
    first = states["The user wants to learn Rust this year."]["provenance"]
    assert first["source_session"] == str(seeded["first"].id) and first["extraction_run"]
    assert {r["id"] for r in doc["extraction_runs"]} >= {first["extraction_run"]}

    by_id = {s["id"]: s for s in doc["sessions"]}
    assert len(by_id) == 4
    kept = [t["content"] for t in by_id[str(seeded["first"].id)]["retained_turns"]]
    assert "We're on-prem, contractually. Never propose cloud services." in kept
    assert by_id[str(seeded["private"].id)]["memory"] == "off"

    assert doc["recall_logs"] and all(r["session"] == str(seeded["third"].id) for r in doc["recall_logs"])
    assert doc["memory_switch"]["enabled"] is False
    assert doc["support_access"] == [
        {"staff": "sam", "page": "/console/users/alice/facts", "at": doc["support_access"][0]["at"]}
    ]
    actions = {e["action"] for e in doc["fact_events"]}
    assert {"created", "confirmed", "superseded"} <= actions


def test_export_never_includes_another_persons_data(org, alice, make_user, scripted, travel):
    bob = make_user("bob", org=org)
    seed_memory(org, bob, scripted, travel)
    doc = export.export_user(alice)
    assert doc["facts"] == [] and doc["sessions"] == [] and doc["recall_logs"] == []
    assert "PlanetScale" not in json.dumps(doc)


def test_a_deleted_fact_is_gone_from_the_export(org, alice, scripted, travel):
    seed_memory(org, alice, scripted, travel)
    target = live_fact(alice, "PlanetScale")
    old = MemoryFact.objects.get(superseded_by=target)
    writing.delete_fact(target, actor=FactEvent.Actor.USER, actor_user=alice)
    doc = export.export_user(alice)
    texts = [f["text"] for f in doc["facts"]]
    assert target.text not in texts and old.text not in texts
    assert not [r for r in doc["recall_logs"] if r["fact"] in (str(target.id), str(old.id))]
    trail = [e["action"] for e in doc["fact_events"] if e["fact"] in (str(target.id), str(old.id))]
    assert trail == ["deleted"]


def test_the_readable_download_names_the_fact_of_each_history_row_in_words(org, alice):
    import html
    import re

    from django.test import Client

    rust = writing.store(alice, "The user wants to learn Rust this year.", "goal").fact
    writing.correct_fact(rust, "The user wants to learn Zig this year.", "goal", actor_user=alice)
    tea = writing.store(alice, "The user drinks green tea.", "preference").fact
    writing.delete_fact(tea, actor=FactEvent.Actor.USER, actor_user=alice)
    client = Client()
    client.force_login(alice)
    page = client.get("/me/data/export.html").content.decode()
    rows = [html.unescape(re.sub(r"<[^>]+>", " ", r)).split() for r in re.findall(r"<tr>(.*?)</tr>", page, re.S)]
    rows = [" ".join(r) for r in rows]
    assert any("You want to learn Rust this year. remembered from a conversation" in r for r in rows), rows
    assert any("You want to learn Rust this year. replaced you" in r for r in rows), rows
    assert any("You want to learn Zig this year. corrected you" in r for r in rows), rows
    assert any("a fact since deleted deleted you" in r for r in rows), rows
    assert not any(" extractor " in f" {r} " for r in rows)  # codes stay in the JSON


def test_the_readable_download_says_what_a_held_item_is_and_why_without_internal_ids(org, alice, monkeypatch):
    import html
    import re

    from django.test import Client

    from memoryapp import validation

    real = validation.judge

    def judge(text, kind, *, vector=None):  # this one sentence reads as a claim
        if "refunds" in text:
            return validation.Judgement("pending", f"to confirm: {validation.PENDING_REASON}", 0.9)
        return real(text, kind, vector=vector)

    monkeypatch.setattr(validation, "judge", judge)
    claim = "The user decides which refunds the shop pays."
    assert writing.store(alice, claim, "profile").outcome == "pending"
    client = Client()
    client.force_login(alice)
    page = client.get("/me/data/export.html").content.decode()
    rows = [
        " ".join(html.unescape(re.sub(r"<[^>]+>", " ", r)).split()) for r in re.findall(r"<tr>(.*?)</tr>", page, re.S)
    ]
    held = next(r for r in rows if "held for your word" in r)
    assert "You decide which refunds the shop pays." in held and "since deleted" not in held
    assert "may claim authority" in held and "candidate" not in held and "to confirm" not in held
