"""manage.py standby start|stop FOLDER: a hot standby of this project's database, for measuring with a replica."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from bench.standby import Standby


class Command(BaseCommand):
    help = (
        "start: copy the database server with pg_basebackup into FOLDER and run it as a streaming hot "
        "standby on a free loopback port; prints the DATABASE_REPLICA_URL to use. stop: stop it and delete FOLDER."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("start", "stop"))
        parser.add_argument("folder", help="a new folder outside the checkout (for example under /tmp)")

    def handle(self, *args, action, folder, **options):
        if action == "stop":
            Standby(folder).remove()
            return
        params = connection.get_connection_params()
        primary = {k: params[k] for k in ("host", "port", "user") if params.get(k)}
        try:
            standby = Standby.start(primary, folder)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(standby.url(params["dbname"]))
