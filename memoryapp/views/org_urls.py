"""Organisation pages, mounted at /orgs/."""

from django.urls import path

from memoryapp.views import org

urlpatterns = [
    path("", org.org_list, name="org-list"),
    path("<slug:slug>/", org.memory, name="org-memory"),
    path("<slug:slug>/facts/add/", org.fact_add, name="org-fact-add"),
    path("<slug:slug>/facts/<uuid:fact_id>/edit/", org.fact_edit, name="org-fact-edit"),
    path("<slug:slug>/facts/<uuid:fact_id>/delete/", org.fact_delete, name="org-fact-delete"),
    path("<slug:slug>/proposals/", org.proposals, name="org-proposals"),
    path("<slug:slug>/proposals/<int:proposal_id>/decide/", org.proposal_decide, name="org-proposal-decide"),
    path("<slug:slug>/members/", org.members, name="org-members"),
    path("<slug:slug>/members/add/", org.member_add, name="org-member-add"),
    path("<slug:slug>/members/<int:membership_id>/role/", org.member_role, name="org-member-role"),
    path("<slug:slug>/members/<int:membership_id>/remove/", org.member_remove, name="org-member-remove"),
    path("<slug:slug>/leave/", org.leave, name="org-leave"),
    path("<slug:slug>/keys/", org.keys, name="org-keys"),
    path("<slug:slug>/keys/create/", org.key_create, name="org-key-create"),
    path("<slug:slug>/keys/<int:key_id>/revoke/", org.key_revoke, name="org-key-revoke"),
    path("<slug:slug>/delete/", org.delete, name="org-delete"),
]
