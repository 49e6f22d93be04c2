from django.apps import AppConfig


class MemoryappConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Registers the Celery tasks in every process (web, commands, tests), not only in workers:
        # sessions.enqueue_extraction looks its task up by name, and Celery's autodiscovery only
        # runs when a worker starts.
        from memoryapp import tasks  # noqa: F401
