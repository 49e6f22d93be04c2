"""Members join only by accepting an invitation: a one-time, expiring link an admin copies and hands on.
No account is attached to an organisation without its own consent, and nothing tells an admin which
accounts exist."""

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from memoryapp import erasure, orgs
from memoryapp.models import Invitation, Membership
from memoryapp.pages.orgs.views import JOIN_RATE_PER_MINUTE

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_rate_counts():
    cache.clear()


@pytest.fixture
def admin(org, make_user):
    return make_user("ada", org, role="admin")


@pytest.fixture
def admin_browser(admin):
    browser = Client()
    browser.force_login(admin)
    return browser


def create_invitation(browser, org, role="member", note="for Bea"):
    response = browser.post(f"/orgs/{org.slug}/invitations/create/", {"role": role, "note": note})
    assert response.status_code == 200, response.content[:300]
    link = response.content.decode().split('id="id_invitation_link" type="text" readonly value="')[1].split('"')[0]
    return response, link.replace("http://testserver", "")


def test_adding_an_existing_account_by_name_is_gone(admin_browser, org, other_org, make_user):
    victim = make_user("victor", other_org)
    staff = make_user("staffer", is_staff=True)
    for who in ("victor", "staffer", "nobody-at-all", "victor@example.test"):
        response = admin_browser.post(f"/orgs/{org.slug}/members/add/", {"who": who, "role": "admin"})
        assert response.status_code == 404
        assert "No account is called" not in response.content.decode()
    assert not Membership.objects.filter(org=org, user__in=[victim, staff]).exists()
    # The victim's own organisation can still act on its person: nobody attached them elsewhere.
    assert list(Membership.objects.filter(user=victim).values_list("org__slug", flat=True)) == ["globex"]


def test_the_invitation_link_is_shown_once_and_only_its_hash_is_kept(admin_browser, org):
    response, link = create_invitation(admin_browser, org)
    assert "no-store" in response["Cache-Control"]
    token = link.rstrip("/").rsplit("/", 1)[1]
    invitation = Invitation.objects.get()
    assert invitation.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in str(dict(admin_browser.session.items()))
    members_page = admin_browser.get(f"/orgs/{org.slug}/members/").content.decode()
    assert token not in members_page and "for Bea" in members_page  # pending, by its note


def test_a_newcomer_chooses_their_own_username_and_password_and_joins(admin_browser, org):
    _, link = create_invitation(admin_browser, org, role="member")
    newcomer = Client()
    preview = newcomer.get(link)
    assert preview.status_code == 200 and "Join Acme" in preview.content.decode()
    assert Invitation.objects.get().accepted_at is None  # looking does not use it
    joined = newcomer.post(
        link, {"username": "bea", "password1": "a long passphrase 42", "password2": "a long passphrase 42"}
    )
    assert joined.status_code == 302 and joined["Location"] == f"/orgs/{org.slug}/"
    bea = get_user_model().objects.get(username="bea")
    assert bea.check_password("a long passphrase 42")
    assert Membership.objects.get(user=bea, org=org).role == "member"
    assert newcomer.get(f"/orgs/{org.slug}/").status_code == 200  # signed in as bea
    assert Client().get(link).status_code == 410  # once only


def test_a_signed_in_person_accepts_with_their_own_account_by_pressing_accept(admin_browser, org, other_org, make_user):
    carl = make_user("carl", other_org)
    _, link = create_invitation(admin_browser, org, role="admin")
    browser = Client()
    browser.force_login(carl)
    page = browser.get(link).content.decode()
    assert "Accept as carl" in page
    assert not Membership.objects.filter(user=carl, org=org).exists()  # no consent yet
    assert browser.post(link).status_code == 302
    assert Membership.objects.get(user=carl, org=org).role == "admin"


def test_bad_signup_input_is_a_form_error_and_uses_nothing(admin_browser, org):
    _, link = create_invitation(admin_browser, org)
    response = Client().post(link, {"username": "bea", "password1": "short", "password2": "other"})
    assert response.status_code == 400 and "errorlist" in response.content.decode()
    assert Invitation.objects.get().accepted_at is None
    assert not get_user_model().objects.filter(username="bea").exists()


def test_revoked_and_expired_invitations_do_not_work(admin_browser, org, travel):
    _, revoked_link = create_invitation(admin_browser, org, note="revoke me")
    invitation = Invitation.objects.get(note="revoke me")
    assert admin_browser.post(f"/orgs/{org.slug}/invitations/{invitation.id}/revoke/").status_code == 302
    assert "revoke me" not in admin_browser.get(f"/orgs/{org.slug}/members/").content.decode()
    _, expiring_link = create_invitation(admin_browser, org, note="slow")
    travel(timedelta(days=8))
    for link in (revoked_link, expiring_link):
        response = Client().post(
            link, {"username": "z", "password1": "a long passphrase 42", "password2": "a long passphrase 42"}
        )
        assert response.status_code == 410 and "can't be used" in response.content.decode()
    assert not get_user_model().objects.filter(username="z").exists()
    assert Client().get("/join/made-up-token/").status_code == 410


def test_members_cannot_invite_or_revoke(admin_browser, org, make_user):
    _, _ = create_invitation(admin_browser, org)
    member = Client()
    member.force_login(make_user("mo", org))
    assert member.post(f"/orgs/{org.slug}/invitations/create/", {"role": "admin"}).status_code == 403
    invitation = Invitation.objects.get()
    assert member.post(f"/orgs/{org.slug}/invitations/{invitation.id}/revoke/").status_code == 403
    assert Invitation.objects.count() == 1 and Invitation.objects.get().revoked_at is None


def test_an_admin_from_an_invitation_makes_the_first_admin_erasable(admin, admin_browser, org):
    _, link = create_invitation(admin_browser, org, role="admin")
    Client().post(link, {"username": "bea", "password1": "a long passphrase 42", "password2": "a long passphrase 42"})
    assert erasure.erase_user(admin, requested_via="self")


def test_accepting_twice_with_the_same_account_is_refused(admin, org):
    invitation, token = orgs.invite(org, admin, "member")
    with pytest.raises(orgs.OrgError, match="already a member"):
        orgs.accept_invitation(token, admin)
    assert Invitation.objects.get(id=invitation.id).accepted_at is None


def test_the_sign_up_form_on_an_invitation_is_rate_limited(admin_browser, org, make_user, rate_window):
    # rate_window: 21 sign-ups on a loaded machine can straddle a minute, and the 21st lands in a fresh window.
    make_user("taken")
    _, link = create_invitation(admin_browser, org)
    prober = Client()
    probe = {"username": "taken", "password1": "a long passphrase 42", "password2": "a long passphrase 42"}
    statuses = [prober.post(link, probe).status_code for _ in range(JOIN_RATE_PER_MINUTE + 1)]
    assert statuses[:JOIN_RATE_PER_MINUTE] == [400] * JOIN_RATE_PER_MINUTE and statuses[-1] == 429
    assert Invitation.objects.get().accepted_at is None


def test_the_django_admin_cannot_attach_an_account_to_an_org_either(org, make_user):
    victim = make_user("vera")
    root = Client()
    root.force_login(make_user("root", is_staff=True, is_superuser=True))
    assert root.get("/admin/memoryapp/membership/add/").status_code == 403
    response = root.post("/admin/memoryapp/membership/add/", {"user": victim.id, "org": org.id, "role": "admin"})
    assert response.status_code == 403
    assert not Membership.objects.filter(user=victim).exists()
