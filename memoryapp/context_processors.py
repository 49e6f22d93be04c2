from memoryapp.models import Membership


def navigation(request):
    """What the header needs: the signed-in person's organisations (for the Team link)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_memberships": Membership.objects.filter(user=user).select_related("org")}
