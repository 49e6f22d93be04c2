"""manage.py load_test: 50 agents x 20 sessions through the API and real workers, then an audit."""

from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from bench import loadtest


class Command(BaseCommand):
    help = (
        "Drive concurrent agents through the HTTP API (uvicorn on loopback, as make run serves it) with real "
        "Celery workers, "
        "then check every session was extracted exactly once, no user has duplicate live facts, "
        "and nothing errored. Needs Redis (REDIS_URL or --broker)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--smoke", action="store_true", help="a small run for CI: 4 agents x 3 sessions")
        parser.add_argument("--agents", type=int, default=50)
        parser.add_argument("--sessions", type=int, default=20, help="sessions per agent")
        parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
        parser.add_argument("--web", type=int, default=2, help="uvicorn worker processes (scripts/run: 2)")
        parser.add_argument("--broker", default=None, help="Redis URL (default: REDIS_URL or the local Redis)")
        parser.add_argument("--timeout", type=int, default=900, help="seconds to wait for the backlog to drain")
        parser.add_argument("--json", default=None, help="where to write the numbers")
        parser.add_argument("--keep", action="store_true", help="keep the test's org, people and facts")

    def handle(self, *args, **opts):
        if opts["smoke"]:
            opts.update(agents=4, sessions=3, workers=1, web=1, timeout=min(opts["timeout"], 300))
        if opts["agents"] < 1 or opts["sessions"] < 1 or opts["workers"] < 1 or opts["web"] < 1:
            raise CommandError("--agents, --sessions, --workers and --web must be at least 1")
        benchmarks.migrate_first(self.stderr)
        report = loadtest.run(
            agents=opts["agents"],
            sessions_per_agent=opts["sessions"],
            workers=opts["workers"],
            web_workers=opts["web"],
            broker=opts["broker"],
            timeout=opts["timeout"],
            keep=opts["keep"],
            out=self.stdout.write,
        )
        path = opts["json"] or (".data/load_test_smoke.json" if opts["smoke"] else ".data/load_test.json")
        self.stdout.write(f"  wrote {loadtest.write_json(report, path)}")
        if not report.get("ok"):
            raise CommandError("the load test found a problem (see the audit above)")
