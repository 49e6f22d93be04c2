import json

from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from evals import harness as evaluation


class Command(BaseCommand):
    help = "Run memory scenarios (JSON files or folders of them) and score them; exits non-zero on any failure."

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", help="scenario files, or folders searched for *.json")
        parser.add_argument("--backend", choices=evaluation.BACKENDS, default="scripted")
        parser.add_argument("-k", dest="name", help="run only scenarios whose name contains this (case-insensitive)")
        parser.add_argument("--json", dest="json_path", metavar="FILE", help="write the full report here")

    def handle(self, *args, paths, backend, name, json_path, **options):
        try:
            scenarios, broken = evaluation.load(paths, backend=backend)
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from None
        if name:
            needle = name.casefold()
            exact = [s for s in scenarios if s.name.casefold() == needle]
            scenarios = exact or [s for s in scenarios if needle in s.name.casefold()]
            broken = [(src, err) for src, err in broken if needle in src.casefold()]
            if not scenarios and not broken:
                raise CommandError(f"no scenario's name contains {name!r}")
        missing = evaluation.missing_configuration(backend)
        if missing:
            raise CommandError(missing)

        benchmarks.migrate_first(self.stderr)
        report = evaluation.run_all(scenarios, backend=backend, broken=broken)
        for line in evaluation.format_failures(report):
            self.stdout.write(line)
        if json_path:
            with open(json_path, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=2, default=str)
            self.stdout.write(f"report written to {json_path}")
        for line in evaluation.format_metrics(report):
            self.stdout.write(line)
        summary = report["summary"]
        line = f"{summary['passed']} passed, {summary['failed']} failed"
        if summary["not_applicable"]:
            # Both shares, so a skipped scenario never quietly raises the score.
            applicable = summary["passed"] + summary["failed"]
            line += (
                f", {summary['not_applicable']} not applicable to {backend} "
                f"({summary['passed']}/{summary['total']} of all, {summary['passed']}/{applicable} of the applicable)"
            )
            for s in report["not_applicable"]:
                self.stdout.write(
                    f"not applicable: {s['name']} (backends: {', '.join(s['backends'])})  [{s['source']}]"
                )
        self.stdout.write(line)
        if summary["failed"]:
            raise CommandError(f"{summary['failed']} scenario(s) failed", returncode=1)
