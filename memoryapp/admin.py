"""Django admin for staff. Memory is read-only here, and every look at it is in the support access log.

Changing memory goes through the domain functions (validation, history, re-embedding); the admin
has no form that writes a fact, a turn or a session, and no delete that skips erasure.
"""

from django.contrib import admin

from memoryapp import models, support_access


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
    exclude = ["embedding", "search_vector"]


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
