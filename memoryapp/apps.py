from django.apps import AppConfig


class MemoryappConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Register the Celery tasks in every process (web, worker, tests): sessions.enqueue_extraction
        # looks its task up by name, which fails unless memoryapp.tasks has been imported.
        from django.contrib.auth import get_user_model
        from django.db.models.signals import pre_delete, pre_save

        from memoryapp import people, signals, tasks  # noqa: F401  (signals: sign-ins are recorded for erasure)

        # Whatever the path (Django admin, shell, a command), an org keeps an admin who can sign in.
        User = get_user_model()
        pre_save.connect(people.guard_account_save, sender=User, dispatch_uid="memoryapp.last_admin_save")
        pre_delete.connect(people.guard_account_delete, sender=User, dispatch_uid="memoryapp.last_admin_delete")
