"""Two kinds of people: those whose memory an agent keeps, and those who operate an organisation."""

from django.conf import settings

from memoryapp import clock
from memoryapp.models import Membership

PORTAL_SESSION_KEY = "memoryapp.portal_only"
PORTAL_SEEN_KEY = "memoryapp.portal_seen"


def operates(user):
    """True for staff, superusers, org admins and anyone with a usable password (who can sign in).

    Such people manage their own memory and erasure by signing in; an organisation's API key never
    signs them in, erases them or changes them. The plain member role the API gives a person it
    creates (so recall can add the org tier) grants nothing by itself: without a password nobody
    can sign in with it, and a portal session is confined to /me/. Everyone who joins an org
    through an invitation has a password of their own, so every member who can act is counted here.
    """
    return bool(
        user.is_staff
        or user.is_superuser
        or user.has_usable_password()
        or Membership.objects.filter(user=user, role=Membership.Role.ADMIN).exists()
    )


def is_portal_session(request):
    """True when the browser was signed in by a portal link (a memory-only session)."""
    return bool(getattr(request, "session", None) is not None and request.session.get(PORTAL_SESSION_KEY))


def start_portal_session(request):
    """Mark a freshly signed-in session as memory-only; it ends at browser close or after idle minutes."""
    request.session[PORTAL_SESSION_KEY] = True
    request.session[PORTAL_SEEN_KEY] = clock.now().timestamp()
    request.session.set_expiry(0)  # a session cookie: gone when the browser closes


def portal_session_idle(request):
    """True when a memory-only session has gone unused for longer than the portal idle limit."""
    seen = request.session.get(PORTAL_SEEN_KEY, 0)
    return clock.now().timestamp() - seen > settings.MEMORY["PORTAL_IDLE_MINUTES"] * 60


def touch_portal_session(request):
    """Note activity on a memory-only session (at most once a minute, to spare session writes)."""
    now = clock.now().timestamp()
    if now - request.session.get(PORTAL_SEEN_KEY, 0) >= 60:
        request.session[PORTAL_SEEN_KEY] = now
