"""End-user pages, mounted at /me/."""

from django.urls import path

from memoryapp.pages.me import views

app_name = "me"

urlpatterns = [
    path("", views.memory, name="memory"),
    path("facts/<uuid:fact_id>/", views.fact, name="fact"),
    path("facts/<uuid:fact_id>/correct/", views.fact_edit, name="fact_edit"),
    path("facts/<uuid:fact_id>/delete/", views.fact_delete, name="fact_delete"),
    path("waiting/<uuid:candidate_id>/keep/", views.waiting_keep, name="waiting_keep"),
    path("waiting/<uuid:candidate_id>/discard/", views.waiting_discard, name="waiting_discard"),
    path("facts/<uuid:fact_id>/restore/", views.fact_restore, name="fact_restore"),
    path("proposals/<int:proposal_id>/withdraw/", views.proposal_withdraw, name="proposal_withdraw"),
    path("conversations/", views.conversations, name="conversations"),
    path("conversations/<uuid:session_id>/", views.conversation, name="conversation"),
    path("known-as/<int:identity_id>/unlink/", views.unlink, name="unlink"),
    path("settings/", views.memory_switch, name="settings"),
    path("data/", views.data, name="data"),
    path("data/export.json", views.export_json, name="export"),
    path("data/export.html", views.export_html, name="export_html"),
    path("erase/", views.erase, name="erase"),
    path("erased/<uuid:receipt_id>/", views.erased, name="erased"),
    path("about/", views.about, name="about"),
    path("portal/<str:token>/", views.portal_link, name="portal"),
]
