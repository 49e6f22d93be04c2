import functools

from memoryapp import orgs, people

AREAS = (("/me/", "me"), ("/console/", "console"), ("/orgs/", "org"))


def navigation(request):
    """What the header needs: the area shown, who is signed in (in words), and the tabs they may open."""
    path = getattr(request, "path", "") or ""
    area = next((name for prefix, name in AREAS if path.startswith(prefix)), "me" if path == "/" else "")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"area": area}
    if people.is_portal_session(request):
        # A memory-only session reaches the person's own /me/ pages only: no org or console tab, and
        # never the generated username of a remembered person.
        return {"area": area, "portal_session": True, "signed_in_as": people.portal_label(user), "nav_memberships": []}
    return {
        "area": area,
        "signed_in_as": user.get_username(),
        # Read when the header renders (the template calls it), not for htmx partials that show none.
        "nav_memberships": functools.partial(orgs.memberships_for, request),
    }
