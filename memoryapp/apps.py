from django.apps import AppConfig


class MemoryappConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Register the Celery tasks in every process (web, worker, tests): sessions.enqueue_extraction
        # looks its task up by name, which fails unless memoryapp.tasks has been imported.
        from memoryapp import tasks  # noqa: F401
