"""Migration 0009: today's rows move to "remembered persons are not members" without losing anything."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("memoryapp", "0012_sign_ins")]
AFTER = [("memoryapp", "0013_remembered_persons")]


def _migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def test_remembered_persons_lose_their_memberships_and_keep_every_fact_session_and_event():
    old = _migrate(BEFORE)
    User = old.get_model("auth", "User")
    Org = old.get_model("memoryapp", "Organization")
    Membership = old.get_model("memoryapp", "Membership")
    Ident = old.get_model("memoryapp", "ExternalIdentity")
    Session = old.get_model("memoryapp", "AgentSession")
    Fact = old.get_model("memoryapp", "MemoryFact")
    Event = old.get_model("memoryapp", "FactEvent")
    try:
        org = Org.objects.create(slug="demo", name="Demo Logistics")
        admin = User.objects.create(username="demo", password="pbkdf2_sha256$1$x$y")
        member = User.objects.create(username="member", password="pbkdf2_sha256$1$x$z")
        customer = User.objects.create(username="u-0123456789abcdef", password="!unusable")
        Membership.objects.create(org=org, user=admin, role="member")  # demoted themselves (the repro)
        Membership.objects.create(org=org, user=member, role="member")
        Membership.objects.create(org=org, user=customer, role="admin")  # a remembered person made admin
        Ident.objects.create(org=org, user=customer, external_id="demo-customer")
        session = Session.objects.create(user=customer, org=org)
        fact = Fact.objects.create(
            user=customer, scope="personal", text="The user keeps bees.", kind="profile", embedding_model="m"
        )
        Event.objects.create(fact_id=fact.id, user=customer, action="created", actor="agent")

        new = _migrate(AFTER)
        Membership = new.get_model("memoryapp", "Membership")
        assert not Membership.objects.filter(user_id=customer.id).exists()
        # The org is managed again by someone who signs in: its longest-standing member.
        assert Membership.objects.get(user_id=admin.id).role == "admin"
        assert Membership.objects.get(user_id=member.id).role == "member"
        assert new.get_model("memoryapp", "ExternalIdentity").objects.get(external_id="demo-customer").user_id == (
            customer.id
        )
        assert new.get_model("memoryapp", "AgentSession").objects.filter(id=session.id, user_id=customer.id).exists()
        assert new.get_model("memoryapp", "MemoryFact").objects.filter(id=fact.id, user_id=customer.id).exists()
        assert new.get_model("memoryapp", "FactEvent").objects.filter(fact_id=fact.id).count() == 1
    finally:
        _migrate(executor_leaf())


def executor_leaf():
    """The newest migration of every app (where the test database was before)."""
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()
