"""Sign-in, rate limited per account name and client address together, and per client address."""

import hashlib
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import SetPasswordForm
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods
from django.views.defaults import permission_denied

from memoryapp import password_reset as password_reset_links
from memoryapp import ratelimit


def _client_ip(request):
    return request.META.get("REMOTE_ADDR", "unknown")


@method_decorator(require_http_methods(["GET", "POST"]), name="dispatch")
class LoginView(auth_views.LoginView):
    template_name = "auth/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        address = _client_ip(request)
        username = request.POST.get("username", "")[:150].casefold()
        # Per account name *and* address: a stranger's wrong guesses from elsewhere never lock the
        # person out of their own account. Per address as well, so one client cannot spray names.
        # Hashed so any characters a client sends make a safe key.
        pair = hashlib.sha256(f"{username}\x00{address}".encode("utf-8", "replace")).hexdigest()[:32]
        limits = (
            (f"login-ip:{address}", settings.MEMORY["LOGIN_ADDRESS_RATE_PER_MINUTE"]),
            (f"login-user-ip:{pair}", settings.MEMORY["LOGIN_RATE_PER_MINUTE"]),
        )
        for bucket, limit in limits:
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
        # Answered, not raised: a refusal the view expects logs no traceback.
        return permission_denied(request, PermissionDenied("The admin site is for staff only."))
    return redirect(f"{reverse('login')}?{urlencode({'next': next_url})}")


@require_http_methods(["GET", "POST"])
def password_reset(request, reset_token):
    """Set a new password from a one-time link. GET only shows the form, so link previewers cannot use it up."""
    try:
        person = password_reset_links.person_for(reset_token)
    except password_reset_links.ResetError as exc:
        return render(request, "auth/reset_invalid.html", {"message": str(exc)}, status=410)
    if request.method == "GET":
        form = SetPasswordForm(person)
    else:
        try:
            form = password_reset_links.reset(reset_token, lambda user: SetPasswordForm(user, request.POST))
        except password_reset_links.ResetError as exc:
            return render(request, "auth/reset_invalid.html", {"message": str(exc)}, status=410)
        if form.is_valid():
            messages.success(request, "Your password is set. Sign in with it.")
            return redirect("login")
    status = 400 if request.method == "POST" else 200
    response = render(request, "auth/reset.html", {"form": form, "person": person}, status=status)
    add_never_cache_headers(response)
    return response
