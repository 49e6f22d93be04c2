from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from memoryapp.api import api
from memoryapp.pages.auth import LoginView, admin_login, password_reset
from memoryapp.pages.health import healthz, readyz
from memoryapp.pages.me import views as me
from memoryapp.pages.orgs import views as orgs

handler500 = "memoryapp.pages.errors.server_error"

urlpatterns = [
    path("", me.home, name="home"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("reset/<str:reset_token>/", password_reset, name="password-reset"),
    path("me/", include("memoryapp.pages.me.urls")),
    path("console/", include("memoryapp.pages.console.urls")),
    path("orgs/", include("memoryapp.pages.orgs.urls")),
    # Outside /orgs/<slug>/ so no organisation's slug can shadow it.
    path("join/<str:invite_token>/", orgs.join, name="org-join"),
    # Before the admin's own URLs: its sign-in form would bypass the rate limit of /login/.
    path("admin/login/", admin_login, name="admin-login"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]

# A 400 page with the site's frame (Django's default renders the template without the request).
handler400 = "memoryapp.pages.rendering.bad_request"
