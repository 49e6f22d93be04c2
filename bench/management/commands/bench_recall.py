"""Recall latency at scale, in a database of its own: `manage.py bench_recall --users 1000 --facts 300`."""

import json

from django.core.management.base import BaseCommand, CommandError

from bench import recall as recallbench


class Command(BaseCommand):
    help = (
        "Load synthetic users (MSC persona sentences, third person) into a separate database with bulk "
        "paths, then time whole recalls and their database part, check them against an exact numpy scan, "
        "and compare per-user exact search with an HNSW index (iterative scan). Prints a table; --json FILE."
    )

    def add_arguments(self, parser):
        parser.add_argument("--users", type=int, default=1000)
        parser.add_argument("--facts", type=int, default=300, help="facts per user")
        parser.add_argument("--recalls", type=int, default=2000, help="timed recalls (each: whole and DB part)")
        parser.add_argument("--smoke", action="store_true", help="a tiny run that takes seconds (CI)")
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument("--datasets", default=str(recallbench.benchdata.DEFAULT_DATASETS))
        parser.add_argument("--database", help="bench database name (default memoryapp_bench[_smoke])")
        parser.add_argument("--keep", action="store_true", help="keep the bench database for the next run")
        parser.add_argument(
            "--hnsw",
            choices=["auto", "on", "off"],
            default="auto",
            help="compare exact per-user search with HNSW (auto: up to 500k facts)",
        )
        parser.add_argument("--vector-queries", type=int, default=1000, help="queries per vector-search method")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument(
            "--cold",
            action="store_true",
            help="every recall the first for its user, after dropping the OS page cache (needs root)",
        )

    def handle(self, *args, **opts):
        config = recallbench.Config.from_options(opts)
        if config.users < 1 or config.facts < 1 or config.recalls < 1:
            raise CommandError("--users, --facts and --recalls must be at least 1")

        def progress(message):
            self.stderr.write(message)
            self.stderr.flush()

        try:
            result = recallbench.run(config, progress)
        except recallbench.BenchError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(recallbench.table(result))
        if opts.get("json_path"):
            with open(opts["json_path"], "w") as f:
                json.dump(result, f, indent=2)
            self.stdout.write(f"wrote {opts['json_path']}")
