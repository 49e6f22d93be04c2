"""Password reset by a one-time link: an org admin issues it for their own members (or staff, or the
last-resort command), the person sets a new password once, and a used or expired link is refused."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from memoryapp import clock, password_reset, sessions
from memoryapp.models import Membership, Organization, PasswordResetLink

pytestmark = pytest.mark.django_db

NEW = "a brand new passphrase 42"


def client_for(user):
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def people(org, make_user):
    globex = Organization.objects.create(slug="globex", name="Globex")
    return {
        "olga": make_user("olga", org, role="admin"),
        "alice": make_user("alice", org),
        "bob": make_user("bob", org),
        "gina": make_user("gina", globex, role="admin"),
        "sam": make_user("sam", is_staff=True),
        "globex": globex,
    }


def _reset_url(org, person):
    membership = Membership.objects.get(org=org, user=person)
    return f"/orgs/{org.slug}/members/{membership.id}/reset-link/"


def _token(link):
    return re.search(r"/reset/([^/]+)/", link).group(1)


def test_an_admin_issues_a_link_once_and_the_member_sets_a_new_password_with_it(org, people):
    response = client_for(people["olga"]).post(_reset_url(org, people["alice"]))
    assert response.status_code == 200
    assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    link = re.search(r'id="id_reset_link"[^>]*value="([^"]+)"', response.content.decode()).group(1)
    token = _token(link)
    assert not PasswordResetLink.objects.filter(token_hash__contains=token).exists()  # stored hashed only

    visitor = Client()
    page = visitor.get(f"/reset/{token}/")
    assert page.status_code == 200 and "alice" in page.content.decode()
    # A mismatched pair is a form error and leaves the link usable.
    bad = visitor.post(f"/reset/{token}/", {"new_password1": NEW, "new_password2": NEW + "x"})
    assert bad.status_code == 400
    done = visitor.post(f"/reset/{token}/", {"new_password1": NEW, "new_password2": NEW})
    assert done.status_code == 302 and done["Location"] == "/login/"
    assert authenticate(username="alice", password=NEW) is not None
    assert authenticate(username="alice", password="correct horse battery") is None

    # Used: refused, and the password stays the one just set.
    again = Client().post(
        f"/reset/{token}/", {"new_password1": "another one 99 zz", "new_password2": "another one 99 zz"}
    )
    assert again.status_code == 410 and "not valid" in again.content.decode()
    assert Client().get(f"/reset/{token}/").status_code == 410
    assert authenticate(username="alice", password=NEW) is not None


def test_an_expired_link_is_refused(org, people):
    link, _ = password_reset.issue_link(people["olga"], people["alice"])
    PasswordResetLink.objects.update(expires_at=clock.now() - timedelta(seconds=1))
    token = _token(link)
    assert Client().get(f"/reset/{token}/").status_code == 410
    assert Client().post(f"/reset/{token}/", {"new_password1": NEW, "new_password2": NEW}).status_code == 410
    assert authenticate(username="alice", password="correct horse battery") is not None


def test_links_last_a_day(org, people):
    _, expires_at = password_reset.issue_link(people["olga"], people["alice"])
    assert timedelta(hours=23) < expires_at - clock.now() <= timedelta(hours=24)


def test_only_an_admin_of_the_persons_own_org_gets_a_link(org, people):
    url = _reset_url(org, people["alice"])
    # Another org's admin: Acme's pages do not exist for her, nor Alice on her own org's route.
    assert client_for(people["gina"]).post(url).status_code == 404
    globex_url = f"/orgs/globex/members/{Membership.objects.get(user=people['alice']).id}/reset-link/"
    assert client_for(people["gina"]).post(globex_url).status_code == 404
    # A plain member: 403. Staff are no members of Acme: 404 on its pages.
    assert client_for(people["bob"]).post(url).status_code == 403
    assert client_for(people["sam"]).post(url).status_code == 404
    assert not PasswordResetLink.objects.exists()

    assert password_reset.refusal(people["olga"], people["alice"]) is None
    assert password_reset.refusal(people["sam"], people["alice"]) is None
    for outsider in ("gina", "bob"):
        with pytest.raises(password_reset.NotAllowed, match="not an admin"):
            password_reset.issue_link(people[outsider], people["alice"])


@pytest.mark.parametrize("who", ["staff", "superuser", "member elsewhere", "admin elsewhere"])
def test_an_org_admin_cannot_take_over_an_account_that_holds_more_than_their_org(org, people, make_user, who):
    """An account that joined the admin's org but is staff, or belongs to another org too, is not theirs to
    reset: the link would hand the admin the console, or the other org."""
    target = make_user("target", org, is_staff=who == "staff", is_superuser=who == "superuser")
    if who.endswith("elsewhere"):
        Membership.objects.create(user=target, org=people["globex"], role=who.split()[0])
    response = client_for(people["olga"]).post(_reset_url(org, target))
    assert response.status_code == 400
    assert "/reset/" not in response.content.decode()
    assert not PasswordResetLink.objects.exists()
    # Staff reset staff and members of several orgs; only a superuser resets a superuser.
    if who == "superuser":
        with pytest.raises(password_reset.NotAllowed, match="superuser"):
            password_reset.issue_link(people["sam"], target)
    else:
        assert password_reset.issue_link(people["sam"], target)[0].count("/reset/") == 1


def test_a_remembered_person_gets_no_link(org, people):
    pat = sessions.get_or_create_user(org, "ext-pat")  # no membership, no password: cannot sign in
    with pytest.raises(password_reset.NotAllowed):
        password_reset.issue_link(people["sam"], pat)
    with pytest.raises(CommandError):
        call_command("reset_password_link", pat.username)
    assert not PasswordResetLink.objects.exists()


def test_the_last_resort_command_prints_a_working_link(org, people):
    out = StringIO()
    call_command("reset_password_link", "olga", "--url", "http://testserver", stdout=out)
    link = re.search(r"http://testserver/reset/\S+/", out.getvalue()).group(0)
    done = Client().post(link, {"new_password1": NEW, "new_password2": NEW})
    assert done.status_code == 302
    assert authenticate(username="olga", password=NEW) is not None
    with pytest.raises(CommandError):
        call_command("reset_password_link", "nobody")


def test_staff_make_links_from_the_admin_shown_once_and_refused_for_a_remembered_person(org, people, make_user):
    root = make_user("root", is_staff=True, is_superuser=True)
    pat = sessions.get_or_create_user(org, "ext-pat")
    response = client_for(root).post(
        "/admin/auth/user/",
        {"action": "reset_links", "_selected_action": [people["alice"].pk, pat.pk], "index": 0},
    )
    assert response.status_code == 200
    assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    page = response.content.decode()
    assert "does not sign in" in page  # the remembered person gets no link, and says why
    link = re.search(r"<code>([^<]+/reset/[^<]+)</code>", page).group(1)
    assert link.startswith("http://testserver/reset/")
    assert PasswordResetLink.objects.get().created_by == root
    done = Client().post(f"/reset/{_token(link)}/", {"new_password1": NEW, "new_password2": NEW})
    assert done.status_code == 302 and authenticate(username="alice", password=NEW) is not None
    # Anyone who is not staff never reaches the action.
    refused = client_for(people["olga"]).post(
        "/admin/auth/user/", {"action": "reset_links", "_selected_action": [people["bob"].pk], "index": 0}
    )
    assert refused.status_code == 302 and "/login/" in refused["Location"]  # the admin sends non-staff to sign in
    assert PasswordResetLink.objects.count() == 1
