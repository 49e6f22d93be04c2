"""Django admin for staff. Rows whose edits would break an invariant are read-only here."""

from django.contrib import admin

from memoryapp import models


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(models.Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]


@admin.register(models.Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "org", "role", "created_at"]
    list_filter = ["role"]
    raw_id_fields = ["user"]


@admin.register(models.ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "org", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]


@admin.register(models.MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ["text", "kind", "scope", "origin", "created_at", "superseded_at", "expired_at"]
    list_filter = ["kind", "scope", "origin"]
    search_fields = ["text"]
    raw_id_fields = ["user", "source_session", "superseded_by", "extraction_run", "added_by"]
    # The embedding and provenance are never edited by hand: corrections go through supersession.
    readonly_fields = [
        "embedding",
        "embedding_model",
        "source_session",
        "source_turns",
        "extraction_run",
        "superseded_at",
        "superseded_by",
        "supersede_reason",
        "created_at",
        "confirmation_count",
    ]

    def has_add_permission(self, request):
        return False

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.superseded_at is not None:
            return [f.name for f in obj._meta.fields]
        return self.readonly_fields


@admin.register(models.AgentSession)
class AgentSessionAdmin(ReadOnly):
    list_display = ["id", "user", "org", "memory", "started_at", "ended_at", "end_reason", "extraction_status"]
    list_filter = ["memory", "extraction_status", "end_reason"]


@admin.register(models.ExtractionRun)
class ExtractionRunAdmin(ReadOnly):
    list_display = ["id", "session", "backend", "model", "status", "started_at", "duration_ms"]
    list_filter = ["status", "backend"]


@admin.register(models.FactEvent)
class FactEventAdmin(ReadOnly):
    list_display = ["fact_id", "action", "actor", "created_at"]
    list_filter = ["action", "actor"]


for model in (models.Turn, models.RecallLog, models.ErasureReceipt, models.SupportAccess, models.ForgettingRun):
    admin.site.register(model, ReadOnly)
