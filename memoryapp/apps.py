from django.apps import AppConfig


class MemoryappConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Register the Celery tasks with the app, so `app.tasks[name]` works in any process
        # (autodiscovery alone only imports them when a worker starts).
        from memoryapp import tasks  # noqa: F401
