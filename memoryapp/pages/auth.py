"""Sign-in, rate limited per account name and per client address."""

import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.shortcuts import render
from django.utils.decorators import method_decorator
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
