"""End-user pages: what the agent remembers about me, and my controls over it."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_GET


@require_GET
@login_required
def home(request):
    if request.user.is_staff:
        return redirect("admin:index")
    return redirect("admin:index")
