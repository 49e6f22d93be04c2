from django.apps import AppConfig


class MemoryappConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Register the Celery tasks in every process, so that sessions.enqueue_extraction can find
        # them by name (importing memoryapp.tasks at module level would be an import cycle).
        from memoryapp import tasks  # noqa: F401
