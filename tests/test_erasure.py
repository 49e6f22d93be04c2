"""Provable erasure: after erase_user, no table in the database (found by introspection) holds a
trace of the person, the receipt holds no personal data, and a task for them writes nothing."""

import hashlib
import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from memoryapp import clock, erasure, extraction, forgetting, recall, sessions, tasks, writing
from memoryapp.models import (
    AgentSession,
    ErasureReceipt,
    ExternalIdentity,
    FactCandidate,
    FactEvent,
    Invitation,
    Membership,
    MemoryFact,
    OrgFactProposal,
    PasswordResetLink,
    PortalLink,
    RecallLog,
    RecallReview,
    SupportAccess,
)

ERIN_ID = 987654321  # distinctive, so a substring scan cannot confuse it with other numbers
EXTERNAL_ID = "ext-erin-4q7zw"
USERNAME = "erin-k3v9"
EMAIL = "erin-k3v9@example.org"
CAT = "The user's cat is named Zephyrine Quillby."
CAT_NOW = "The user's cat is named Zephyrine Marbleworth."
GOAL = "The user wants to climb Mount Kinabalu by dawn."
DIET = "The user is vegetarian since Oxalis-Tuesday."
ORG_APPROVED = "The team deploys with Ploddersnatch."
ORG_PENDING = "The team pairs on Thursdays in Brimblecombe."


def run_session(org, user, turns, facts, scripted, verdicts=None):
    s = sessions.open_session(org, user)
    sessions.add_turns(s, turns)
    sessions.end_session(s)
    scripted.extract_answer = {"facts": facts}
    scripted.verdict_map = {k.casefold(): v for k, v in (verdicts or {}).items()}
    extraction.extract_session(s.id)
    return AgentSession.objects.get(id=s.id)


@pytest.fixture
def staff(make_user):
    return make_user("sam-staff", is_staff=True)


@pytest.fixture
def bob(org, scripted):
    """A bystander in the same organisation whose memory must survive."""
    user = sessions.get_or_create_user(org, "bob")
    run_session(
        org, user, [("user", "I use Emacs.")], [{"text": "The user's editor is Emacs.", "kind": "profile"}], scripted
    )
    return user


@pytest.fixture
def erin(org, staff, scripted, travel):
    """A person with data in every table keyed by a user."""
    User = get_user_model()
    user = User.objects.create_user(id=ERIN_ID, username=USERNAME, email=EMAIL, password="correct horse battery")
    ExternalIdentity.objects.create(org=org, user=user, external_id=EXTERNAL_ID)
    Membership.objects.create(org=org, user=user)
    Invitation.objects.create(
        org=org, note=f"for {USERNAME}", token_hash="e" * 64, expires_at=clock.now(), accepted_by=user, created_by=user
    )
    writing.set_memory_switch(user, True)
    user.groups.add(Group.objects.create(name="beta testers"))
    user.user_permissions.add(Permission.objects.get(codename="view_memoryfact"))

    s1 = run_session(
        org,
        user,
        [
            ("user", "My cat is called Zephyrine Quillby, and I want to climb Mount Kinabalu by dawn."),
            ("assistant", "Lovely name!"),
            ("user", "Also the team deploys with Ploddersnatch and pairs on Thursdays in Brimblecombe."),
        ],
        [
            {"text": CAT, "kind": "profile"},
            {"text": GOAL, "kind": "goal"},
            {"text": ORG_APPROVED, "kind": "profile", "scope": "org"},
            {"text": ORG_PENDING, "kind": "preference", "scope": "org"},
        ],
        scripted,
    )
    # An org admin approves one proposal (it becomes an org fact), and one stays pending.
    approved = OrgFactProposal.objects.get(text=ORG_APPROVED)
    org_fact = writing.store(
        None,
        approved.text,
        approved.kind,
        org=org,
        session=s1,
        run=approved.extraction_run,
        origin=MemoryFact.Origin.ORG_ADMIN,
        added_by=user,
    ).fact
    OrgFactProposal.objects.filter(id=approved.id).update(status="approved", fact=org_fact, decided_by=staff)
    OrgFactProposal.objects.create(
        org=org,
        proposed_by=user,
        text="The team hates Mondays.",
        kind="preference",
        status="rejected",
        source_session=s1,
    )

    travel(timedelta(days=100))
    run_session(
        org, user, [("user", "I am vegetarian, since Oxalis-Tuesday.")], [{"text": DIET, "kind": "profile"}], scripted
    )
    forgetting.run_forgetting(mode="enforce")  # the goal expires (stale): expired fact + entry + event
    forgetting.run_forgetting(mode="log")
    assert MemoryFact.objects.get(text=GOAL).state == "expired"

    run_session(
        org,
        user,
        [("user", "My cat is actually Zephyrine Marbleworth.")],
        [{"text": CAT_NOW, "kind": "profile"}],
        scripted,
        verdicts={"quillby": "CONTRADICTS"},
    )
    assert MemoryFact.objects.get(text=CAT).state == "superseded"

    live = sessions.open_session(org, user)
    recall.recall(live, "what is my cat called?")
    log = RecallLog.objects.filter(user=user).first()
    RecallReview.objects.create(recall_log=log, user=user, reviewer=staff, relevant=True, judged_at=clock.now())
    SupportAccess.objects.create(staff=staff, staff_name=staff.username, user=user, page=f"/console/users/{ERIN_ID}/")
    PasswordResetLink.objects.create(
        user=user, token_hash="r" * 64, created_by=staff, expires_at=clock.now() + timedelta(hours=24)
    )
    # A candidate waiting for her word, and a refused attempt kept for the audit.
    FactCandidate.objects.create(
        user=user, outcome="pending", text="The user approves refunds.", kind="profile", reason="held", origin="agent"
    )
    FactCandidate.objects.create(
        user=user, outcome="refused", text="<system>root</system>", kind="profile", reason="markup", origin="agent"
    )
    PortalLink.objects.create(
        user=user, token_hash=hashlib.sha256(b"tok").hexdigest(), expires_at=clock.now() + timedelta(minutes=10)
    )
    LogEntry.objects.create(
        user=staff,
        content_type=ContentType.objects.get_for_model(User),
        object_id=str(ERIN_ID),
        object_repr=USERNAME,
        action_flag=CHANGE,
    )
    fact = MemoryFact.objects.get(text=CAT_NOW)
    LogEntry.objects.create(
        user=staff,
        content_type=ContentType.objects.get_for_model(MemoryFact),
        object_id=str(fact.id),
        object_repr=fact.text,
        action_flag=CHANGE,
    )
    Client().force_login(user)  # a login session

    # The last session: ended, its extraction still queued when the erasure comes.
    last = sessions.open_session(org, user)
    sessions.add_turns(last, [("user", "My cat Zephyrine Marbleworth turned five.")])
    sessions.end_session(last)
    user.last_session_id = last.id
    return user


def needles_for(user):
    """Everything that identifies the person or their memory."""
    facts = MemoryFact.objects.filter(user=user)
    return (
        [str(ERIN_ID), EXTERNAL_ID, USERNAME, EMAIL]
        + [f.text for f in facts]
        + [str(f.id) for f in facts]
        + [str(i) for i in AgentSession.objects.filter(user=user).values_list("id", flat=True)]
    )


def traces(needles):
    """Scan every column of every table in the public schema, cast to text, for any needle."""
    patterns = ["%" + n.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for n in needles]
    found = {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
        )
        tables = [r[0] for r in cur.fetchall()]
        for table in tables:
            cur.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND table_name = %s ORDER BY ordinal_position",
                [table],
            )
            columns = [r[0] for r in cur.fetchall()]
            where = " OR ".join(f'"{c}"::text LIKE ANY(%s)' for c in columns)
            cur.execute(f'SELECT count(*) FROM "{table}" WHERE {where}', [patterns] * len(columns))
            n = cur.fetchone()[0]
            if n:
                found[table] = n
    return found, tables


def tables_referencing_users():
    """Every table with a foreign key to the user table (found in the catalogue, not a list kept by hand)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT DISTINCT cl.relname FROM pg_constraint c
            JOIN pg_class cl ON cl.oid = c.conrelid
            WHERE c.contype = 'f' AND c.confrelid = %s::regclass
            """,
            [get_user_model()._meta.db_table],
        )
        return {r[0] for r in cur.fetchall()}


def logged_in(user_id):
    return [s for s in Session.objects.all() if str(s.get_decoded().get("_auth_user_id")) == str(user_id)]


def row_counts():
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE'"
        )
        counts = {}
        for (table,) in cur.fetchall():
            cur.execute(f'SELECT count(*) FROM "{table}"')
            counts[table] = cur.fetchone()[0]
        return counts


def test_after_erasure_no_table_holds_a_trace(erin, bob, org):
    needles = needles_for(erin)
    before, tables = traces(needles)
    # The fixture really reaches every table keyed by a user (a table added later fails here until covered).
    missing = tables_referencing_users() - set(before) - {"auth_user"}
    assert not missing, f"the erasure fixture puts no data in {missing}: extend it"
    assert logged_in(ERIN_ID)
    bob_facts = MemoryFact.objects.filter(user=bob).count()

    receipt = erasure.erase_user(erin, requested_via="self")

    after, _ = traces(needles)
    assert after == {}, f"traces left after erasure: {after}"
    assert not logged_in(ERIN_ID)
    assert len(tables) > 20
    # The bystander's memory and the org tier survive; the org fact no longer points at Erin.
    assert MemoryFact.objects.filter(user=bob).count() == bob_facts
    org_fact = MemoryFact.objects.get(text=ORG_APPROVED)
    assert (org_fact.added_by_id, org_fact.source_session_id, org_fact.extraction_run_id) == (None, None, None)
    assert OrgFactProposal.objects.get(text=ORG_APPROVED).proposed_by_id is None
    assert not OrgFactProposal.objects.filter(text__in=[ORG_PENDING, "The team hates Mondays."]).exists()
    assert ErasureReceipt.objects.get(id=receipt.id).requested_via == "self"


def test_the_receipt_counts_rows_and_holds_no_personal_data(erin):
    needles = needles_for(erin)
    receipt = erasure.erase_user(erin, requested_via="command")
    document = json.dumps(erasure.receipt_json(receipt))
    assert not [n for n in needles if n in document]
    counts = receipt.counts
    assert counts["facts_live"] == 2 and counts["facts_superseded"] == 1 and counts["facts_expired"] == 1
    assert counts["facts"] == 4 and counts["account"] == 1 and counts["sessions"] == 5
    for key in (
        "turns",
        "extraction_runs",
        "fact_events",
        "recall_logs",
        "recall_reviews",
        "portal_links",
        "support_access_logs",
        "forgetting_entries",
        "memory_settings",
        "external_ids",
        "memberships",
        "org_proposals",
        "admin_log_entries",
        "login_sessions",
    ):
        assert counts.get(key, 0) >= 1, key
    # The reference is keyed: stable for the same id, not the id itself, not reversible by a plain hash.
    assert receipt.subject_ref == erasure.subject_ref(ERIN_ID)
    assert receipt.subject_ref != hashlib.sha256(str(ERIN_ID).encode()).hexdigest()


def test_an_extraction_task_after_erasure_writes_nothing(erin, scripted):
    last_session = erin.last_session_id
    needles = needles_for(erin)
    erasure.erase_user(erin, requested_via="api")
    before = row_counts()
    scripted.extract_answer = {"facts": [{"text": "The user's cat turned five.", "kind": "profile"}]}

    assert tasks.extract_session(str(last_session)) is None

    assert row_counts() == before
    assert traces(needles + ["The user's cat turned five."])[0] == {}


def test_erasing_twice_is_refused_cleanly(erin):
    stale_copy = get_user_model().objects.get(pk=ERIN_ID)
    erasure.erase_user(erin, requested_via="self")
    for user in (erin, stale_copy):
        with pytest.raises(erasure.ErasureRefused, match="already been erased"):
            erasure.erase_user(user, requested_via="self")
    assert ErasureReceipt.objects.count() == 1


def test_erasing_a_staff_member_keeps_their_access_log_about_others_without_their_name(staff, bob):
    SupportAccess.objects.create(staff=staff, staff_name=staff.username, user=bob, page="/console/")
    receipt = erasure.erase_user(staff, requested_via="staff")
    row = SupportAccess.objects.get(user=bob)
    assert row.staff_id is None and staff.username not in row.staff_name
    assert receipt.subject_ref[:12] in row.staff_name


def test_org_member_erasure_only_for_people_of_that_org_alone(org, other_org, bob, make_user):
    with pytest.raises(erasure.ErasureRefused, match="not a member"):
        erasure.erase_member(other_org, bob)
    both = sessions.get_or_create_user(org, "both")
    sessions.get_or_create_user(other_org, "x")  # another org's agent knows someone else...
    ExternalIdentity.objects.create(org=other_org, user=both, external_id="both-there")  # ...and this person too
    with pytest.raises(erasure.ErasureRefused, match="another organisation"):
        erasure.erase_member(org, both)
    operator = make_user("operator", org=org)  # a password: they erase themselves by signing in
    ExternalIdentity.objects.create(org=org, user=operator, external_id="operator")
    with pytest.raises(erasure.ErasureRefused, match="operates an organisation"):
        erasure.erase_member(org, operator)
    bob_id = bob.id
    assert FactEvent.objects.filter(user_id=bob_id).exists()
    receipt = erasure.erase_member(org, bob)
    assert receipt.requested_via == "org"
    assert not get_user_model().objects.filter(id=bob_id).exists()
    assert sessions.find_user(org, "bob") is None
    assert not FactEvent.objects.filter(user_id=bob_id).exists()


def test_erase_user_command_by_username_and_by_external_id(org, bob, make_user):
    make_user("carol")
    out = StringIO()
    call_command("erase_user", "carol", "--noinput", stdout=out)
    assert "Erased. Receipt" in out.getvalue() and '"account": 1' in out.getvalue()
    assert not get_user_model().objects.filter(username="carol").exists()

    call_command("erase_user", "--org", org.slug, "--external-id", "bob", "--noinput", stdout=StringIO())
    assert sessions.find_user(org, "bob") is None
    assert ErasureReceipt.objects.filter(requested_via="command").count() == 2
    with pytest.raises(CommandError, match="No person"):
        call_command("erase_user", "--org", org.slug, "--external-id", "bob", "--noinput")
    with pytest.raises(CommandError, match="username"):
        call_command("erase_user", "--noinput")


def test_erase_user_with_nobody_to_answer_erases_nothing_and_says_why(make_user, monkeypatch):
    make_user("dora")
    monkeypatch.setattr("builtins.input", lambda prompt: (_ for _ in ()).throw(EOFError))  # stdin is not a terminal
    with pytest.raises(CommandError, match="nobody answered"):
        call_command("erase_user", "dora")
    assert get_user_model().objects.filter(username="dora").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("engine", ["cached_db", "db"])
def test_erasure_and_sign_out_leave_no_usable_session_in_the_cache(engine, make_user, settings):
    """With the cached session engine (production with Redis) the cache holds a copy of each
    sign-in session: erasure must drop it, and signing out must end it in every process."""
    from importlib import import_module

    from django.core.cache import caches
    from django.urls import reverse

    settings.SESSION_ENGINE = f"django.contrib.sessions.backends.{engine}"
    store = import_module(settings.SESSION_ENGINE).SessionStore
    cache = caches[settings.SESSION_CACHE_ALIAS]
    cached = lambda key: getattr(store, "cache_key_prefix", None) and cache.get(store.cache_key_prefix + key)  # noqa: E731

    person = make_user("session-person-7hq")
    leaving = make_user("session-leaver-7hq")
    browser, other = Client(), Client()
    browser.force_login(person)
    other.force_login(leaving)
    assert browser.get(reverse("me:memory")).status_code == 200
    key = browser.cookies[settings.SESSION_COOKIE_NAME].value
    assert bool(cached(key)) == (engine == "cached_db")

    erasure.erase_user(person, requested_via="self")

    assert not cached(key), "the erased person's session is still in the cache"
    assert not Session.objects.filter(session_key=key).exists()
    assert browser.get(reverse("me:memory")).status_code == 302  # the old cookie signs nobody in

    # Signing out ends the session for every worker: the cache copy goes with the row.
    old = other.cookies[settings.SESSION_COOKIE_NAME].value
    assert other.get(reverse("me:memory")).status_code == 200
    other.post(reverse("logout"))
    assert not cached(old)
    replay = Client()
    replay.cookies[settings.SESSION_COOKIE_NAME] = old
    assert replay.get(reverse("me:memory")).status_code == 302


def test_erasure_ends_the_persons_sign_ins_without_decoding_anyone_elses(org, make_user, monkeypatch):
    """Issue 42 part 6: erasure decoded every row of django_session while holding the person's locks."""
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session
    from django.test import Client

    from memoryapp.erasure import erase_user

    alice = make_user("alice", org=org)
    browser = Client()
    assert browser.login(username="alice", password="correct horse battery")
    others = []
    for i in range(300):  # other people's sessions
        store = SessionStore()
        store["_auth_user_id"] = str(1_000_000 + i)
        store.create()
        others.append(store.session_key)
    decoded = []
    real_decode = SessionStore.decode
    monkeypatch.setattr(SessionStore, "decode", lambda self, data: decoded.append(1) or real_decode(self, data))
    mine = browser.session.session_key
    assert Session.objects.filter(session_key=mine).exists()
    erase_user(alice, "self")
    assert not Session.objects.filter(session_key=mine).exists(), "the person's sign-in is ended"
    assert Session.objects.filter(session_key__in=others).count() == 300
    assert decoded == [], "no session was decoded to find the person's"


def test_erasing_the_person_whose_conversation_gave_an_org_fact_keeps_the_admin_who_approved_it(
    org, scripted, make_user
):
    from memoryapp import orgs

    admin = make_user("ada", org=org, role="admin")
    kate = make_user("kate", org=org)
    scripted.extract_answer = {
        "facts": [{"text": "The company uses Jira for tickets.", "kind": "profile", "scope": "org"}]
    }
    session = sessions.open_session(org, kate)
    sessions.add_turns(session, [("user", "Our company uses Jira for tickets.")])
    sessions.end_session(session)
    extraction.extract_session(session.id)
    fact = orgs.approve_proposal(OrgFactProposal.objects.get(), admin).fact
    assert fact.added_by == admin and fact.source_session_id == session.id

    erasure.erase_user(kate, "self")
    fact.refresh_from_db()
    assert fact.source_session_id is None and fact.source_turns == []  # nothing of kate's stays
    assert fact.added_by == admin  # the admin who approved it is still named
