"""Who is who: remembered persons (an agent keeps their memory), members and staff; portal sessions."""

from django.conf import settings

from memoryapp import clock
from memoryapp.models import ExternalIdentity, Membership, Organization

PORTAL_SESSION_KEY = "memoryapp.portal_only"
PORTAL_SEEN_KEY = "memoryapp.portal_seen"
PORTAL_MADE_BY_KEY = "memoryapp.portal_made_by"


def can_sign_in(user):
    """True for an active account with a password of its own: only such a member may hold the admin role."""
    return bool(user.is_active and user.password and user.has_usable_password())


def operates(user):
    """True for staff, superusers, org members and anyone with a usable password (who can sign in).

    Such people manage their own memory and erasure by signing in; an organisation's API key never
    signs them in, erases them or changes them. Everyone else is a remembered person: an org's
    agents know them by an external id (ExternalIdentity), and they never hold a membership or a role.
    """
    return bool(
        user.is_staff
        or user.is_superuser
        or user.has_usable_password()
        or Membership.objects.filter(user=user).exists()
    )


def last_admin_of(user_id, lock=False):
    """The orgs `user_id` is the only admin who can sign in of (locked, in id order, when `lock`)."""
    admin_of = Membership.objects.filter(user_id=user_id, role=Membership.Role.ADMIN).values("org_id")
    found = Organization.objects.filter(id__in=admin_of).order_by("id")
    if lock:
        found = found.select_for_update()
    others = Membership.objects.who_can_sign_in().filter(role=Membership.Role.ADMIN).exclude(user_id=user_id)
    return [org for org in found if not others.filter(org=org).exists()]


class LastAdmin(ValueError):
    """The change would leave an organisation with no admin who can sign in; the message says which."""


def refuse_last_admin(user_id):
    """Raise LastAdmin when `user_id` is the only admin who can sign in of an organisation."""
    for org in last_admin_of(user_id):
        raise LastAdmin(f"This account is the only admin of {org.name} who can sign in: make someone else admin first.")


def guard_account_save(sender, instance, update_fields=None, **kwargs):
    """pre_save on accounts, for every path (Django admin, shell, commands): the last admin keeps signing in."""
    if instance.pk is None or can_sign_in(instance):
        return
    if update_fields is not None and not {"is_active", "password"} & set(update_fields):
        return
    refuse_last_admin(instance.pk)


def guard_account_delete(sender, instance, **kwargs):
    """pre_delete on accounts: the last admin who can sign in is never deleted, whatever the path."""
    refuse_last_admin(instance.pk)


def org_tier_orgs(user_id):
    """Ids of the orgs whose shared tier reaches this person: those they joined, those whose agents know them."""
    joined = Membership.objects.filter(user_id=user_id).values_list("org_id", flat=True)
    known = ExternalIdentity.objects.filter(user_id=user_id).values_list("org_id", flat=True)
    return set(joined) | set(known)


def identities(user):
    """The ids organisations' agents know this person by, with their orgs, by org name."""
    return list(ExternalIdentity.objects.filter(user=user).select_related("org").order_by("org__name", "external_id"))


def portal_label(user):
    """How a memory-only session names its person: "You, as known to <org>" (never a generated username)."""
    orgs = sorted({i.org.name for i in identities(user)})
    return f"You, as known to {' and '.join(orgs)}" if orgs else "You"


def is_portal_session(request):
    """True when the browser was signed in by a portal link (a memory-only session)."""
    return bool(getattr(request, "session", None) is not None and request.session.get(PORTAL_SESSION_KEY))


def start_portal_session(request, made_by=""):
    """Mark a freshly signed-in session as memory-only; it ends at browser close or after idle minutes."""
    request.session[PORTAL_SESSION_KEY] = True
    request.session[PORTAL_MADE_BY_KEY] = made_by
    request.session[PORTAL_SEEN_KEY] = clock.now().timestamp()
    request.session.set_expiry(0)  # a session cookie: gone when the browser closes


def portal_maker(request):
    """Who asked for the sign-in link of this memory-only session ("API key 'desk agent'"); "" for any other."""
    return request.session.get(PORTAL_MADE_BY_KEY, "") if is_portal_session(request) else ""


def portal_session_idle(request):
    """True when a memory-only session has gone unused for longer than the portal idle limit."""
    seen = request.session.get(PORTAL_SEEN_KEY, 0)
    return clock.now().timestamp() - seen > settings.MEMORY["PORTAL_IDLE_MINUTES"] * 60


def touch_portal_session(request):
    """Note activity on a memory-only session (at most once a minute, to spare session writes)."""
    now = clock.now().timestamp()
    if now - request.session.get(PORTAL_SEEN_KEY, 0) >= 60:
        request.session[PORTAL_SEEN_KEY] = now
