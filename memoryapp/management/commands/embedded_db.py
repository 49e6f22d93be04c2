"""Show or stop the embedded PostgreSQL that the app starts under .data/ when DATABASE_URL is unset."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memoryapp import db


class Command(BaseCommand):
    help = "status: is the embedded PostgreSQL running, and where. stop: stop it (fast shutdown)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["status", "stop"])

    def handle(self, *args, action, **options):
        if not settings.DATABASES["default"].get("EMBEDDED"):
            raise CommandError("DATABASE_URL is set: this process does not use the embedded database.")
        running, pid, uri = db.embedded_status()
        if action == "status":
            if running:
                self.stdout.write(f"running (pid {pid}), data in {db.DATA_DIR / 'pg'}, {uri}")
            else:
                self.stdout.write(f"not running (data in {db.DATA_DIR / 'pg'}); the next command needing it starts it")
            return
        if not running:
            self.stdout.write("not running")
        elif db.embedded_stop():
            self.stdout.write(f"stopped (was pid {pid})")
        else:
            raise CommandError(f"the server (pid {pid}) did not stop within 30 s")
