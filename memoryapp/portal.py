"""One-time sign-in links to "My memory", issued to an end user's agent through the API."""

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.core import signing
from django.urls import reverse

from memoryapp import clock
from memoryapp.models import ExternalIdentity, Membership, PortalLink

SALT = "memoryapp.portal"


class PortalError(Exception):
    """A link that cannot be used; `status` is the HTTP status and the message says why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class NotAllowed(ValueError):
    """This person cannot be signed in by this organisation's link; the message says why."""


def _hash(raw):
    return hashlib.sha256(raw.encode()).hexdigest()


def lifetime():
    """How long a new link stays valid."""
    return timedelta(minutes=settings.MEMORY["PORTAL_LINK_MINUTES"])


def issue_link(user, base_url="", org=None):
    """A new signed, one-time link for `user`: returns (url, expires_at); only a hash is stored.

    With `org` (the API key's organisation), refused for people who also belong to another
    organisation: a link shows all of a person's memory, not just what this organisation's agent saw.
    """
    if user.is_staff or user.is_superuser:
        # Why: an organisation's API key must never be able to mint a session for a staff account.
        raise NotAllowed("Portal links can only be issued for end users, not staff.")
    if org is not None and (
        Membership.objects.filter(user=user).exclude(org=org).exists()
        or ExternalIdentity.objects.filter(user=user).exclude(org=org).exists()
    ):
        raise NotAllowed("This person also uses another organisation's assistant, so they sign in themselves.")
    raw = secrets.token_urlsafe(32)
    expires_at = clock.now() + lifetime()
    PortalLink.objects.create(user=user, token_hash=_hash(raw), expires_at=expires_at)
    token = signing.Signer(salt=SALT).sign(raw)
    return base_url.rstrip("/") + reverse("me:portal", args=[token]), expires_at


def redeem(token):
    """The user a link signs in, marking it used; PortalError (400 bad, 410 used or expired) otherwise."""
    try:
        raw = signing.Signer(salt=SALT).unsign(token)
    except signing.BadSignature:
        raise PortalError(400, "This sign-in link is not valid. Ask the assistant for a new one.") from None
    link = PortalLink.objects.select_related("user").filter(token_hash=_hash(raw)).first()
    if link is None:
        # A signed token with no row: the link was used and its account erased, or never existed here.
        raise PortalError(410, "This sign-in link is no longer valid. Ask the assistant for a new one.")
    now = clock.now()
    if link.used_at is not None:
        raise PortalError(410, "This sign-in link has already been used. Each link works once.")
    if link.expires_at <= now:
        raise PortalError(410, "This sign-in link has expired. Links are valid for a few minutes only.")
    # The conditional update makes the link single-use even if it is opened twice at once.
    claimed = PortalLink.objects.filter(id=link.id, used_at__isnull=True).update(used_at=now)
    if not claimed:
        raise PortalError(410, "This sign-in link has already been used. Each link works once.")
    if link.user.is_staff or link.user.is_superuser or not link.user.is_active:
        raise PortalError(400, "This sign-in link cannot be used for this account.")
    return link.user
