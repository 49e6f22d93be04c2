from django.apps import AppConfig


class MemoryappConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"
