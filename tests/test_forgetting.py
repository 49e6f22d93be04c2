"""The forgetting job: exactly the facts the rules name expire (enforce), nothing changes (log),
expired facts can be restored within the grace period and are purged after it."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memoryapp import clock, forgetting, recall, writing
from memoryapp.backends import anthropic as llm
from memoryapp.models import AgentSession, FactEvent, ForgettingEntry, ForgettingRun, MemoryFact, RecallLog

DAY = timedelta(days=1)


def judge(new_text, old_texts):
    """Only the very same sentence is a duplicate; everything else is independent."""
    return ["DUPLICATE" if old == new_text else "INDEPENDENT" for old in old_texts], llm.Usage()


def store(user, text, kind, **kw):
    return writing.store(user, text, kind, judge=judge, **kw).fact


def mark_recalled(fact):
    """Put the fact in a memory block now, the way recall records it: one recall log row."""
    session = AgentSession.objects.create(user=fact.user)
    RecallLog.objects.create(user=fact.user, session=session, fact=fact, tier="relevant", created_at=clock.now())


@pytest.fixture
def world(make_user, org, travel):
    """Facts of every kind and age for one person and one organisation; the clock ends at day 100."""
    alice = make_user("alice", org=org)
    f = {}
    # day 0
    f["goal_stale"] = store(alice, "The user wants to learn Rust this spring.", "goal")
    f["goal_recalled_stale"] = store(alice, "The user is training for a half marathon.", "goal")
    f["goal_reconfirmed"] = store(alice, "The user is writing a book about bees.", "goal")
    f["pref_never_recalled"] = store(alice, "The user likes answers with bullet points.", "preference")
    f["pref_restated_never_recalled"] = store(alice, "The user writes Go at work.", "preference")
    f["pref_recalled"] = store(alice, "The user prefers metric units.", "preference")
    f["profile_never_recalled"] = store(alice, "The user is a backend engineer in Lisbon.", "profile")
    f["constraint_never_recalled"] = store(alice, "The user's code must run on Python 3.9.", "constraint")
    f["pref_superseded"] = store(alice, "The user's editor is Vim.", "preference")
    f["org_goal"] = store(None, "The team aims to ship v2 by summer.", "goal", org=org, origin="org_admin")
    f["org_pref"] = store(None, "The team writes changelogs in past tense.", "preference", org=org, origin="org_admin")
    travel(DAY)
    f["pref_replacement"] = writing.correct_fact(
        f["pref_superseded"], "The user's editor is Helix.", "preference", actor_user=alice
    ).fact
    mark_recalled(f["pref_replacement"])
    travel(4 * DAY)
    mark_recalled(f["goal_recalled_stale"])
    mark_recalled(f["goal_reconfirmed"])
    mark_recalled(f["pref_recalled"])
    travel(45 * DAY)  # day 50
    assert store(alice, "The user is writing a book about bees.", "goal").id == f["goal_reconfirmed"].id
    # Said again, but recall never chose it: the seed's rule still expires it.
    assert store(alice, "The user writes Go at work.", "preference").id == f["pref_restated_never_recalled"].id
    f["pref_young"] = store(alice, "The user reads on an e-ink tablet.", "preference")
    f["goal_young"] = store(alice, "The user wants to visit Kyoto.", "goal")
    travel(50 * DAY)  # day 100
    return alice, f


EXPECTED = {
    "goal_stale": forgetting.STALE_GOAL,  # a goal: stale wins over never-recalled
    "goal_recalled_stale": forgetting.STALE_GOAL,
    "pref_never_recalled": forgetting.NEVER_RECALLED,
    "pref_restated_never_recalled": forgetting.NEVER_RECALLED,
}


def snapshot():
    return {
        f.id: (f.expired_at, f.expired_rule, f.superseded_at, f.last_confirmed_at) for f in MemoryFact.objects.all()
    }


def test_enforce_expires_exactly_the_facts_the_rules_name(world):
    alice, f = world
    ids = {f[name].id: rule for name, rule in EXPECTED.items()}

    run = forgetting.run_forgetting(mode="enforce")

    expired = dict(MemoryFact.objects.filter(expired_at__isnull=False).values_list("id", "expired_rule"))
    assert expired == ids
    assert run.matched == 4 and run.removed == 0
    assert dict(run.entries.values_list("fact_id", "rule")) == ids
    assert all(run.entries.values_list("applied", flat=True))
    events = FactEvent.objects.filter(action=FactEvent.Action.EXPIRED)
    assert sorted(events.values_list("fact_id", "actor")) == sorted((i, "forgetting") for i in ids)
    # The superseded fact stays for audit, untouched.
    old = MemoryFact.objects.get(id=f["pref_superseded"].id)
    assert old.superseded_at is not None and old.expired_at is None
    # Expired facts drop out of recall; profile and constraint never expire on a timer.
    chosen = {s.fact.id for s in recall.select(alice, "learn Rust, bullet points, half marathon")}
    assert not chosen & set(ids)
    assert {f["profile_never_recalled"].id, f["constraint_never_recalled"].id} <= chosen


def test_log_mode_records_what_would_expire_and_changes_nothing(world):
    before = snapshot()
    events_before = FactEvent.objects.count()

    run = forgetting.run_forgetting(mode="log")
    again = forgetting.run_forgetting()  # the default mode is log

    assert snapshot() == before
    assert FactEvent.objects.count() == events_before
    expected = {world[1][name].id: rule for name, rule in EXPECTED.items()}
    for r in (run, again):
        assert r.mode == "log" and r.matched == 4
        assert dict(r.entries.values_list("fact_id", "rule")) == expected
        assert not any(r.entries.values_list("applied", flat=True))


def test_running_twice_expires_each_fact_once(world):
    first = forgetting.run_forgetting(mode="enforce", batch=2)
    second = forgetting.run_forgetting(mode="enforce", batch=2)
    assert first.matched == 4 and second.matched == 0
    assert FactEvent.objects.filter(action=FactEvent.Action.EXPIRED).count() == 4


def test_batches_cover_every_fact_whatever_the_batch_size(world):
    expected = {world[1][name].id for name in EXPECTED}
    seen = []
    run = forgetting.run_forgetting(mode="log", batch=1, progress=lambda *a: seen.append(a))
    assert set(run.entries.values_list("fact_id", flat=True)) == expected
    # Only facts old enough for some rule are examined: those from day 0/1, not the two from day 50.
    assert run.examined == 11
    assert seen[-1] == (11, 11, 4) and len(seen) == 11


def test_org_facts_follow_their_own_rules(world, travel):
    _, f = world
    forgetting.run_forgetting(mode="enforce")
    assert MemoryFact.objects.get(id=f["org_goal"].id).expired_at is None  # 180 days for org goals
    travel(81 * DAY)  # day 181
    forgetting.run_forgetting(mode="enforce")
    assert MemoryFact.objects.get(id=f["org_goal"].id).expired_rule == forgetting.STALE_GOAL
    assert MemoryFact.objects.get(id=f["org_pref"].id).expired_at is None  # org facts: never "never recalled"


def test_owner_restores_within_grace_and_it_stays(world, make_user, travel):
    alice, f = world
    forgetting.run_forgetting(mode="enforce")
    fact = MemoryFact.objects.get(id=f["pref_never_recalled"].id)
    with pytest.raises(forgetting.RestoreRefused):
        forgetting.restore_fact(fact, make_user("mallory"))
    travel(29 * DAY)

    restored = forgetting.restore_fact(fact, alice)

    assert restored.state == "live" and restored.expired_rule == ""
    event = FactEvent.objects.get(fact_id=fact.id, action=FactEvent.Action.RESTORED)
    assert (event.actor, event.actor_user_id) == ("user", alice.id)
    # The next nightly run does not expire it again straight away.
    forgetting.run_forgetting(mode="enforce")
    assert MemoryFact.objects.get(id=fact.id).expired_at is None
    assert fact.id in {s.fact.id for s in recall.select(alice, "bullet points")}
    with pytest.raises(forgetting.RestoreRefused, match="not expired"):
        forgetting.restore_fact(restored, alice)


def test_staff_restore_and_org_admin_restore(world, make_user, org, travel):
    _, f = world
    travel(81 * DAY)
    forgetting.run_forgetting(mode="enforce")
    staff = make_user("sam", is_staff=True)
    forgetting.restore_fact(MemoryFact.objects.get(id=f["goal_stale"].id), staff)
    assert FactEvent.objects.get(fact_id=f["goal_stale"].id, action="restored").actor == "staff"
    org_fact = MemoryFact.objects.get(id=f["org_goal"].id)
    with pytest.raises(forgetting.RestoreRefused):
        forgetting.restore_fact(org_fact, make_user("member", org=org))
    forgetting.restore_fact(org_fact, make_user("boss", org=org, role="admin"))
    assert MemoryFact.objects.get(id=org_fact.id).state == "live"


def test_after_the_grace_period_the_job_removes_them_for_real(world, travel):
    alice, f = world
    forgetting.run_forgetting(mode="enforce")
    expired_ids = [f[name].id for name in EXPECTED]
    travel(31 * DAY)
    with pytest.raises(forgetting.RestoreRefused, match="grace period"):
        forgetting.restore_fact(MemoryFact.objects.get(id=expired_ids[0]), alice)

    forgetting.run_forgetting(mode="log")  # log mode never deletes
    assert MemoryFact.objects.filter(id__in=expired_ids).count() == 4
    run = forgetting.run_forgetting(mode="enforce")

    assert run.removed == 4
    assert not MemoryFact.objects.filter(id__in=expired_ids).exists()
    # Only a deletion event remains for each: the trail says that it happened, not what it said.
    for fid in expired_ids:
        assert list(FactEvent.objects.filter(fact_id=fid).values_list("action", "actor")) == [("deleted", "forgetting")]
    # The superseded fact is still there for audit.
    assert MemoryFact.objects.filter(id=f["pref_superseded"].id).exists()


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="log, enforce"):
        forgetting.run_forgetting(mode="delete-everything")
    with pytest.raises(CommandError):
        call_command("forget", "--mode", "nope")


def test_forget_command_shows_progress_and_a_summary(world):
    out = StringIO()
    call_command("forget", "--batch", "3", stdout=out)
    text = out.getvalue()
    assert "mode log" in text
    assert "3/11 facts examined" in text and "11/11 facts examined (100%)" in text
    assert "4 would have expired (log mode: nothing changed)" in text
    assert "stale_goal: 2" in text and "never_recalled: 2" in text
    assert "peak memory" in text
    assert not MemoryFact.objects.filter(expired_at__isnull=False).exists()

    out = StringIO()
    call_command("forget", "--mode", "enforce", stdout=out)
    assert "4 expired" in out.getvalue()
    assert MemoryFact.objects.filter(expired_at__isnull=False).count() == 4
    assert ForgettingRun.objects.count() == 2 and ForgettingEntry.objects.filter(applied=True).count() == 4


def test_the_nightly_tasks_call_the_job(world, settings):
    from memoryapp import tasks

    settings.MEMORY = {**settings.MEMORY, "FORGETTING_MODE": "enforce"}
    run_id = tasks.forget()
    assert ForgettingRun.objects.get(id=run_id).mode == "enforce"
    assert MemoryFact.objects.filter(expired_at__isnull=False).count() == 4
    assert tasks.apply_retention() == 0  # no turns in this fixture
