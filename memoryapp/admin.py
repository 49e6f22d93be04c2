"""Django admin for staff. Memory is read-only here, and every look at it is in the support access log.

Changing memory goes through the domain functions (validation, history, re-embedding); the admin
has no form that writes a fact, a turn or a session, and no delete that skips erasure.
"""

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

from memoryapp import models, password_reset, people, support_access


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MemoryReadOnly(ReadOnly):
    """Rows that hold someone's memory or words: each list and each row viewed is logged per person."""

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        changelist = (getattr(response, "context_data", None) or {}).get("cl")
        if changelist is not None:
            support_access.record_many(
                request.user, [row.user_id for row in changelist.result_list], f"admin: {request.get_full_path()}"
            )
        return response

    def change_view(self, request, object_id, form_url="", extra_context=None):
        response = super().change_view(request, object_id, form_url, extra_context)
        if response.status_code == 200:
            obj = self.get_object(request, object_id)
            if obj is not None:
                support_access.record(request.user, obj.user_id, f"admin: {request.get_full_path()}")
        return response


@admin.register(models.Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]


@admin.register(models.Membership)
class MembershipAdmin(ReadOnly):
    # People join an organisation only by accepting an invitation (their consent), never from here.
    list_display = ["user", "org", "role", "created_at"]
    list_filter = ["role"]
    raw_id_fields = ["user"]


@admin.register(models.ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "org", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]


@admin.register(models.MemoryFact)
class MemoryFactAdmin(MemoryReadOnly):
    # Corrections go through /me/ or the console (validation, supersession, history, a new embedding).
    list_display = ["text", "kind", "scope", "origin", "created_at", "superseded_at", "expired_at"]
    list_filter = ["kind", "scope", "origin"]
    search_fields = ["text"]
    exclude = list(models.MemoryFact.BULKY)


@admin.register(models.AgentSession)
class AgentSessionAdmin(MemoryReadOnly):
    list_display = ["id", "user", "org", "memory", "started_at", "ended_at", "end_reason", "extraction_status"]
    list_filter = ["memory", "extraction_status", "end_reason"]


@admin.register(models.Turn)
class TurnAdmin(MemoryReadOnly):
    list_display = ["id", "session_id", "role", "created_at"]


@admin.register(models.ExtractionRun)
class ExtractionRunAdmin(MemoryReadOnly):
    list_display = ["id", "session", "backend", "model", "status", "started_at", "duration_ms"]
    list_filter = ["status", "backend"]


@admin.register(models.RecallLog)
class RecallLogAdmin(MemoryReadOnly):
    list_display = ["id", "session_id", "fact_id", "tier"]


@admin.register(models.FactEvent)
class FactEventAdmin(ReadOnly):
    list_display = ["fact_id", "action", "actor", "created_at"]
    list_filter = ["action", "actor"]


for model in (models.ErasureReceipt, models.SupportAccess, models.ForgettingRun):
    admin.site.register(model, ReadOnly)


class AccountForm(UserAdmin.form):
    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and cleaned.get("is_active") is False:
            try:
                people.refuse_last_admin(self.instance.pk)
            except people.LastAdmin as exc:
                raise forms.ValidationError(str(exc)) from None
        return cleaned


class AccountAdmin(UserAdmin):
    """Django's user admin, except that the last admin of an org who can sign in is never deactivated or deleted."""

    form = AccountForm
    actions = ["reset_links"]

    @admin.action(description="Make one-time password reset links")
    def reset_links(self, request, queryset):
        """A page with one link for each selected person who signs in, shown once and never cached."""
        base_url = request.build_absolute_uri("/")
        rows = []
        for person in queryset.order_by("username"):
            try:
                link, expires_at = password_reset.issue_link(request.user, person, base_url)
                rows.append({"person": person, "link": link, "expires_at": expires_at})
            except password_reset.NotAllowed as exc:
                rows.append({"person": person, "refused": str(exc)})
        context = {**self.admin_site.each_context(request), "title": "Password reset links", "rows": rows}
        response = TemplateResponse(request, "admin/reset_links.html", context)
        add_never_cache_headers(response)
        return response

    def has_delete_permission(self, request, obj=None):
        if obj is not None and people.last_admin_of(obj.pk):
            return False
        return super().has_delete_permission(request, obj)


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, AccountAdmin)
