"""One-time sign-in links to "My memory", issued to an end user's agent through the API."""

import secrets
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.urls import reverse

from memoryapp import clock, onetime, people
from memoryapp.models import ExternalIdentity, Membership, PortalLink

SALT = "memoryapp.portal"


class PortalError(Exception):
    """A link that cannot be used; `status` is the HTTP status and the message says why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class NotAllowed(ValueError):
    """This person cannot be signed in by a portal link; the message says why."""


OPERATOR_MESSAGE = (
    "This person operates an organisation (a member, an admin, staff, or an account with a password), "
    "so they see and erase their memory by signing in themselves; an API key cannot sign them in."
)


_hash = onetime.token_hash


def lifetime():
    """How long a new link stays valid."""
    return timedelta(minutes=settings.MEMORY["PORTAL_LINK_MINUTES"])


def maker_in_words(link):
    """Who asked for a link, for the person opening it: the admin who made it, or None for their assistant."""
    return link.made_by if link.made_by_user_id is not None else None


def issue_link(user, base_url="", org=None, made_by="", made_by_user=None):
    """A new signed, one-time link for `user`: returns (url, expires_at); only a hash is stored.

    Only for people whose memory an agent keeps: never for anyone who operates an organisation
    (they would get a session an API key minted). With `org` (the API key's organisation), also
    refused for people another organisation's agent knows: a link shows all of a person's memory.
    """
    if people.operates(user):
        # Why: an organisation's API key must never mint a session for someone who manages an org.
        raise NotAllowed(OPERATOR_MESSAGE)
    if org is not None and (
        Membership.objects.filter(user=user).exclude(org=org).exists()
        or ExternalIdentity.objects.filter(user=user).exclude(org=org).exists()
    ):
        raise NotAllowed("This person also uses another organisation's assistant, so they sign in themselves.")
    raw = secrets.token_urlsafe(32)
    expires_at = clock.now() + lifetime()
    PortalLink.objects.create(
        user=user, token_hash=_hash(raw), expires_at=expires_at, made_by=made_by[:200], made_by_user=made_by_user
    )
    token = signing.Signer(salt=SALT).sign(raw)
    return base_url.rstrip("/") + reverse("me:portal", args=[token]), expires_at


def _usable_link(token):
    """The unused, unexpired PortalLink behind `token`; PortalError (400 bad, 410 used or expired) otherwise."""
    try:
        raw = signing.Signer(salt=SALT).unsign(token)
    except signing.BadSignature:
        raise PortalError(400, "This sign-in link is not valid. Ask the assistant for a new one.") from None
    link = PortalLink.objects.select_related("user").filter(token_hash=_hash(raw)).first()
    if link is None:
        # A signed token with no row: the link was used and its account erased, or never existed here.
        raise PortalError(410, "This sign-in link is no longer valid. Ask the assistant for a new one.")
    if link.used_at is not None:
        raise PortalError(410, "This sign-in link has already been used. Each link works once.")
    if link.expires_at <= clock.now():
        raise PortalError(410, "This sign-in link has expired. Links are valid for a few minutes only.")
    return link


def check(token):
    """The link (its person, who asked for it), or the PortalError it would give, unused (a GET only looks)."""
    return _usable_link(token)


def redeem(token):
    """The link (its `user` signed in, `made_by` who asked), marked used; PortalError (400 bad, 410 used or expired)."""
    link = _usable_link(token)
    # The conditional update makes the link single-use even if it is opened twice at once.
    claimed = PortalLink.objects.filter(id=link.id, used_at__isnull=True).update(used_at=clock.now())
    if not claimed:
        raise PortalError(410, "This sign-in link has already been used. Each link works once.")
    if people.operates(link.user) or not link.user.is_active:
        raise PortalError(400, "This sign-in link cannot be used for this account.")
    return link
