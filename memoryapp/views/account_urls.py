"""End-user pages, mounted at /me/."""

from django.urls import path

from memoryapp.views import account

app_name = "account"

urlpatterns = [
    path("", account.memory, name="memory"),
    path("facts/<uuid:fact_id>/", account.fact, name="fact"),
    path("facts/<uuid:fact_id>/correct/", account.fact_edit, name="fact_edit"),
    path("facts/<uuid:fact_id>/delete/", account.fact_delete, name="fact_delete"),
    path("conversations/", account.conversations, name="conversations"),
    path("conversations/<uuid:session_id>/", account.conversation, name="conversation"),
    path("settings/", account.memory_switch, name="settings"),
    path("data/", account.data, name="data"),
    path("data/export.json", account.export_json, name="export"),
    path("erase/", account.erase, name="erase"),
    path("erased/<uuid:receipt_id>/", account.erased, name="erased"),
    path("about/", account.about, name="about"),
    path("portal/<str:token>/", account.portal_link, name="portal"),
]
