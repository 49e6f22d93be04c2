"""Issue 41 part 3: a key reaches only what its scopes say. Signing a person in to their own pages
(where they can erase everything) is its own scope, `portal`, and new keys start with read and write."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from memoryapp import orgs, sessions
from memoryapp.models import ApiKey, PortalLink
from tests.conftest import Api

pytestmark = pytest.mark.django_db


def test_a_read_only_key_cannot_mint_a_portal_link_and_so_cannot_reach_erasure(org):
    person = sessions.get_or_create_user(org, "customer-7")
    _, key = sessions.create_api_key(org, "dashboard", ["read"])
    response = Api(key).post("/v1/users/customer-7/portal")
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden" and "'portal'" in error["message"]
    assert not PortalLink.objects.exists()
    # No link, so no session on the person's pages: /me/erase/ sends a stranger to sign in.
    assert Client().get("/me/erase/").status_code == 302
    assert type(person).objects.filter(id=person.id).exists()


def test_a_key_with_the_portal_scope_mints_a_link(org):
    sessions.get_or_create_user(org, "customer-7")
    _, key = sessions.create_api_key(org, "support desk", ["portal"])
    response = Api(key).post("/v1/users/customer-7/portal")
    assert response.status_code == 200 and "/me/portal/" in response.json()["url"]


def test_new_keys_start_with_read_and_write_only(org):
    api_key, key = sessions.create_api_key(org, "agent")
    assert api_key.scopes == ["read", "write"]
    assert Api(key).post("/v1/users/someone/portal").status_code == 403
    assert Api(key).delete("/v1/users/someone").status_code == 403
    out = StringIO()
    call_command("create_api_key", "--org", org.slug, "--name", "bot", stdout=out)
    assert sessions.authenticate_key(out.getvalue().strip().splitlines()[-1]).scopes == ["read", "write"]
    call_command("create_api_key", "--org", org.slug, "--name", "desk", "--scopes", "read,portal", stdout=out)
    assert sessions.authenticate_key(out.getvalue().strip().splitlines()[-1]).scopes == ["read", "portal"]


def test_the_keys_page_names_each_scope_and_checks_only_read_and_write(org, make_user):
    make_user("olga", org, role="admin")
    client = Client()
    client.login(username="olga", password="correct horse battery")
    page = client.get(f"/orgs/{org.slug}/keys/").content.decode()
    for scope, checked in (("read", True), ("write", True), ("erase", False), ("portal", False)):
        box = page.split(f'name="scopes" value="{scope}"', 1)[1].split(">", 1)[0]
        assert ("checked" in box) is checked, scope
    assert "Issue one-time sign-in links" in page  # the page says what `portal` allows
    api_key, _ = orgs.create_key(org, "desk", ["read", "portal"])
    assert api_key.scopes == ["read", "portal"]
    with pytest.raises(orgs.OrgError, match="portal"):
        orgs.create_key(org, "nothing", [])


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_portal_links_working_for_keys_that_had_read(org):
    """Existing keys keep exactly the powers they had: `read` used to mint portal links."""
    before, after = [("memoryapp", "0010_rate_counters")], [("memoryapp", "0011_apikey_portal_scope")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        OldKey = executor.loader.project_state(before).apps.get_model("memoryapp", "ApiKey")
        for name, scopes in (("all", ["read", "write", "erase"]), ("reader", ["read"]), ("writer", ["write"])):
            OldKey.objects.create(org_id=org.id, name=name, prefix=name, key_hash=name, scopes=scopes)
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    scopes = dict(ApiKey.objects.values_list("name", "scopes"))
    assert scopes == {"all": ["read", "write", "erase", "portal"], "reader": ["read", "portal"], "writer": ["write"]}


def test_a_write_only_key_is_never_told_the_persons_own_words(org, make_user):
    """A key without `read` learns the outcome of its writes, never the text of a fact it did not send."""
    from memoryapp import writing
    from memoryapp.models import MemoryFact

    person = sessions.get_or_create_user(org, "corr1")
    said = writing.store(person, "The user lives in Paris.", "profile").fact
    page = Client()
    page.force_login(person)
    page.post(f"/me/facts/{said.id}/correct/", {"text": "The user lives in Rome, near the Vatican.", "kind": "profile"})
    theirs = MemoryFact.objects.for_user(person).live().get()
    _, write_only = sessions.create_api_key(org, "ingest", ["write"])
    _, reader = sessions.create_api_key(org, "agent", ["read", "write"])

    held = Api(write_only).post("/v1/users/corr1/facts", {"text": "The user lives in Paris.", "kind": "profile"})
    assert held.status_code == 200 and held.json()["outcome"] == "held" and held.json()["fact"] is None
    again = Api(write_only).post("/v1/users/corr1/facts", {"text": theirs.text, "kind": "profile"})
    assert again.json()["outcome"] == "confirmed" and again.json()["fact"] is None
    refused = Api(write_only).patch(f"/v1/facts/{said.id}", {"text": "The user lives in Madrid."})
    assert refused.status_code == 409 and str(theirs.id) in refused.json()["error"]["message"]
    assert "Rome" not in refused.content.decode() and "Rome" not in held.content.decode()
    # A key that may read is told the person's version, as before.
    told = Api(reader).post("/v1/users/corr1/facts", {"text": "The user lives in Paris.", "kind": "profile"})
    assert told.json()["fact"]["text"] == theirs.text
    assert "Rome" in Api(reader).patch(f"/v1/facts/{said.id}", {"text": "The user lives in Madrid."}).content.decode()
