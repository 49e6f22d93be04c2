"""manage.py drill load|burst|flood and the fault drills (provider-hung|provider-down|worker-killed|worker-stopped|
db-stopped): the shipped server on loopback, audited (bench/drill.py)."""

import os
import subprocess
import sys
import tempfile

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from bench import drill, loadtest


class Command(BaseCommand):
    help = (
        "Start uvicorn (2 workers) and a Celery worker on a private Redis queue, on loopback, run a bounded "
        "drill (load: 20 clients; burst: 50 x 10 sessions; flood: 32 threads of made-up keys and oversized "
        "bodies beside 4 agents), then compare acknowledged with stored, count 5xx, peak PostgreSQL "
        "connections and 'too many clients'. Fault drills: a fake model provider on loopback whose verdict "
        "calls hang or fail, a worker killed or stopped mid-extraction, the embedded PostgreSQL stopped under "
        "20 writers (on a server of its own in a tmp dir). Needs Redis (REDIS_URL or --broker)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", choices=sorted(drill.DRILLS))
        parser.add_argument("--smoke", action="store_true", help="a small run for tests (well under a minute)")
        parser.add_argument("--db-pool", choices=("on", "off"), help="the server's DB_POOL (default: this one's)")
        parser.add_argument("--broker", default=None, help="a Redis on loopback (default: REDIS_URL or the local one)")
        parser.add_argument("--max-seconds", type=int, default=600, help="no new session starts after this")
        parser.add_argument("--settle-timeout", type=int, default=600, help="seconds to wait for extraction")
        parser.add_argument("--json", default=None, help="where to write the report")

    def handle(self, *args, **o):
        if o["name"] == "db-stopped" and not os.environ.get("MEMORYAPP_DRILL_OWN_DB"):
            return self._on_a_server_of_its_own(o)
        benchmarks.migrate_first(self.stderr)
        db_pool = None if o["db_pool"] is None else o["db_pool"] == "on"
        try:
            report = drill.run(
                o["name"],
                smoke=o["smoke"],
                db_pool=db_pool,
                broker=o["broker"],
                max_seconds=o["max_seconds"],
                settle_timeout=o["settle_timeout"],
                out=self.stdout.write,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        path = o["json"] or f".data/drill-{o['name']}{'-smoke' if o['smoke'] else ''}.json"
        self.stdout.write(f"  wrote {loadtest.write_json(report, path)}")
        if not report["ok"]:
            raise CommandError(f"drill {o['name']} missed a target: {report['targets']}")

    def _on_a_server_of_its_own(self, o):
        """Run db-stopped again in a child whose embedded PostgreSQL lives in a tmp dir, then stop that server.

        Why: the drill stops the server; the developer's (under .data/) or one DATABASE_URL names is never it.
        """
        if not settings.DATABASES["default"].get("EMBEDDED"):
            raise CommandError("db-stopped stops an embedded PostgreSQL of its own; unset DATABASE_URL to run it")
        with tempfile.TemporaryDirectory(prefix="drill-db-stopped-") as data_dir:
            env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
            env.update(MEMORYAPP_DATA_DIR=data_dir, MEMORYAPP_DRILL_OWN_DB="1")
            argv = [sys.executable, "manage.py", "drill", "db-stopped", "--max-seconds", str(o["max_seconds"])]
            argv += ["--settle-timeout", str(o["settle_timeout"])] + (["--smoke"] if o["smoke"] else [])
            argv += ["--broker", o["broker"]] if o["broker"] else []
            argv += ["--db-pool", o["db_pool"]] if o["db_pool"] else []
            path = os.path.abspath(o["json"] or f".data/drill-db-stopped{'-smoke' if o['smoke'] else ''}.json")
            try:
                done = subprocess.run([*argv, "--json", path], cwd=settings.BASE_DIR, env=env, check=False)
            finally:
                stop = "from memoryapp import db; db.embedded_stop()"
                subprocess.run([sys.executable, "-c", stop], cwd=settings.BASE_DIR, env=env, check=False)
        if done.returncode:
            raise CommandError(f"drill db-stopped failed or missed a target (exit {done.returncode}); see {path}")
