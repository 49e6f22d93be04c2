"""Sign-in, rate limited per account name and per client address."""

import hashlib
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from memoryapp import ratelimit


def _client_ip(request):
    return request.META.get("REMOTE_ADDR", "unknown")


@method_decorator(require_http_methods(["GET", "POST"]), name="dispatch")
class LoginView(auth_views.LoginView):
    template_name = "auth/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        limit = settings.MEMORY["LOGIN_RATE_PER_MINUTE"]
        username = request.POST.get("username", "")[:150].casefold()
        # Hashed so any characters a client sends make a safe cache key.
        user_key = hashlib.sha256(username.encode("utf-8", "replace")).hexdigest()[:32]
        for bucket in (f"login-ip:{_client_ip(request)}", f"login-user:{user_key}"):
            allowed, retry_after = ratelimit.hit(bucket, limit)
            if not allowed:
                response = render(request, "auth/too_many.html", {"retry_after": retry_after}, status=429)
                response["Retry-After"] = str(retry_after)
                return response
        return super().post(request, *args, **kwargs)


@require_http_methods(["GET", "POST"])
def admin_login(request):
    """The Django admin signs in through the one, rate-limited sign-in page (never its own form)."""
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = reverse("admin:index")
    if request.user.is_authenticated:
        if request.user.is_active and request.user.is_staff:
            return redirect(next_url)
        raise PermissionDenied("The admin site is for staff only.")
    return redirect(f"{reverse('login')}?{urlencode({'next': next_url})}")
