from memoryapp.models import Membership

AREAS = (("/me/", "me"), ("/console/", "console"), ("/orgs/", "org"))


def navigation(request):
    """What the header needs: the area being shown and the signed-in person's organisations."""
    path = getattr(request, "path", "") or ""
    area = next((name for prefix, name in AREAS if path.startswith(prefix)), "me" if path == "/" else "")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"area": area}
    return {"area": area, "nav_memberships": Membership.objects.filter(user=user).select_related("org")}
