"""Django's makemigrations, except that it never starts the embedded database.

Django checks the migration history against the database when it can; a stopped embedded
server means there is nothing to check, so `makemigrations --check` in CI boots no server.
"""

import warnings

from django.core.management.commands import makemigrations

from memoryapp import db


class Command(makemigrations.Command):
    def handle(self, *args, **options):
        token = db.start_allowed.set(False)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Got an error checking a consistent migration history")
                return super().handle(*args, **options)
        finally:
            db.start_allowed.reset(token)
