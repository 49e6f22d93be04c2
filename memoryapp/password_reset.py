"""Password reset by a one-time link: an org admin (for their own members) or staff issues it and passes it on.

There is no mail server: the issuer sees the link once. Only its hash is stored (memoryapp.onetime).
"""

from datetime import timedelta

from django.db import transaction
from django.urls import reverse

from memoryapp import clock, onetime, people
from memoryapp.models import Membership, PasswordResetLink

LIFETIME = timedelta(hours=24)


class ResetError(Exception):
    """A reset link that cannot be used (one message for every reason: it reveals nothing)."""


class NotAllowed(ValueError):
    """This person gets no reset link; the message says why."""


def refusal(issuer, person):
    """Why `issuer` may not reset `person`'s password, or None when they may.

    A reset link hands over the account, so the issuer must already hold everything it opens: only a
    superuser resets a superuser, only staff reset staff, and an org admin resets only people whose
    every membership is in an org they administer (one org's admin taking over an account that is
    staff, or a member elsewhere, would gain what that org never gave them). `issuer` None is the
    operator's own command on the server.
    """
    if issuer is None or issuer.is_superuser:
        return None
    if person.is_superuser:
        return "Only a superuser can reset a superuser's password."
    if issuer.is_staff:
        return None
    if person.is_staff:
        return "Support staff's passwords are reset by other staff, not by an organisation's admin."
    admin_orgs = Membership.objects.filter(user=issuer, role=Membership.Role.ADMIN).values("org_id")
    theirs = Membership.objects.filter(user=person)
    if not theirs.filter(org_id__in=admin_orgs).exists():
        return "You are not an admin of an organisation this person belongs to."
    if theirs.exclude(org_id__in=admin_orgs).exists():
        return "This person also belongs to another organisation: support staff can reset their password."
    return None


def issue_link(issuer, person, base_url=""):
    """A new one-time link for `person` to set a password: returns (url, expires_at).

    Only for active accounts of people who sign in (members, staff, accounts with a password); a remembered
    person has no password to reset; and only for someone the issuer may reset (`refusal`).
    """
    reason = refusal(issuer, person)
    if reason:
        raise NotAllowed(reason)
    if not person.is_active or not people.operates(person):
        raise NotAllowed("This person does not sign in: the memory an agent keeps about them opens by a portal link.")
    token, digest = onetime.new_token()
    expires_at = clock.now() + LIFETIME
    PasswordResetLink.objects.create(user=person, token_hash=digest, created_by=issuer, expires_at=expires_at)
    return base_url.rstrip("/") + reverse("password-reset", args=[token]), expires_at


def _usable(token):
    return (
        PasswordResetLink.objects.select_related("user")
        .filter(token_hash=onetime.token_hash(token), used_at__isnull=True, expires_at__gt=clock.now())
        .first()
    )


INVALID = "This password reset link is not valid: it was used, it expired, or it never existed. Ask for a new one."


def person_for(token):
    """The account a usable link resets, without using it (a GET only looks); ResetError otherwise."""
    link = _usable(token)
    if link is None or not people.operates(link.user) or not link.user.is_active:
        raise ResetError(INVALID)
    return link.user


def reset(token, form_for):
    """Set the password from `form_for(user)` (a SetPasswordForm) and use the link up; returns the valid form.

    Raises ResetError for a dead link; returns an invalid form unchanged (the link stays usable).
    """
    user = person_for(token)
    form = form_for(user)
    if not form.is_valid():
        return form
    with transaction.atomic():
        # The conditional update makes the link single-use even if it is submitted twice at once.
        claimed = PasswordResetLink.objects.filter(
            token_hash=onetime.token_hash(token), used_at__isnull=True, expires_at__gt=clock.now()
        ).update(used_at=clock.now())
        if not claimed:
            raise ResetError(INVALID)
        form.save()
        # Every other reset link for this account dies with this one.
        PasswordResetLink.objects.filter(user=user, used_at__isnull=True).update(used_at=clock.now())
    return form
