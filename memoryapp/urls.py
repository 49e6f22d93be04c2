from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from memoryapp.api import api
from memoryapp.views import account
from memoryapp.views.auth import LoginView
from memoryapp.views.health import healthz

urlpatterns = [
    path("", account.home, name="home"),
    path("healthz", healthz, name="healthz"),
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("me/", include("memoryapp.views.account_urls")),
    path("console/", include("memoryapp.views.support_urls")),
    path("orgs/", include("memoryapp.views.org_urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
]
