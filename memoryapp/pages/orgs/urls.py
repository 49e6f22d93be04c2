"""Organisation pages, mounted at /orgs/."""

from django.urls import path

from memoryapp.pages.orgs import views

urlpatterns = [
    path("", views.org_list, name="org-list"),
    path("<slug:slug>/", views.memory, name="org-memory"),
    path("<slug:slug>/facts/add/", views.fact_add, name="org-fact-add"),
    path("<slug:slug>/facts/<uuid:fact_id>/edit/", views.fact_edit, name="org-fact-edit"),
    path("<slug:slug>/facts/<uuid:fact_id>/delete/", views.fact_delete, name="org-fact-delete"),
    path("<slug:slug>/proposals/", views.proposals, name="org-proposals"),
    path("<slug:slug>/proposals/<int:proposal_id>/decide/", views.proposal_decide, name="org-proposal-decide"),
    path("<slug:slug>/members/", views.members, name="org-members"),
    path("<slug:slug>/invitations/create/", views.invitation_create, name="org-invitation-create"),
    path("<slug:slug>/invitations/<int:invitation_id>/revoke/", views.invitation_revoke, name="org-invitation-revoke"),
    path("<slug:slug>/members/<int:membership_id>/role/", views.member_role, name="org-member-role"),
    path("<slug:slug>/members/<int:membership_id>/remove/", views.member_remove, name="org-member-remove"),
    path("<slug:slug>/members/<int:membership_id>/reset-link/", views.member_reset_link, name="org-member-reset-link"),
    path("<slug:slug>/people/", views.remembered, name="org-people"),
    path("<slug:slug>/people/<int:identity_id>/portal/", views.remembered_portal, name="org-people-portal"),
    path("<slug:slug>/people/<int:identity_id>/erase/", views.remembered_erase, name="org-people-erase"),
    path("<slug:slug>/leave/", views.leave, name="org-leave"),
    path("<slug:slug>/keys/", views.keys, name="org-keys"),
    path("<slug:slug>/keys/create/", views.key_create, name="org-key-create"),
    path("<slug:slug>/keys/<int:key_id>/revoke/", views.key_revoke, name="org-key-revoke"),
    path("<slug:slug>/delete/", views.delete, name="org-delete"),
]
