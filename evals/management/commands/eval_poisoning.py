import json

from django.core.management.base import BaseCommand

from evals import poisoning


class Command(BaseCommand):
    help = "Poisoning corpus: block rate on attacks and false-rejection rate on benign facts, per split and category."

    def add_arguments(self, parser):
        parser.add_argument("--json", metavar="FILE", help="also write the full result as JSON to FILE")
        parser.add_argument(
            "--show",
            choices=["dev", "test", "holdout", "all", "none"],
            default="dev",
            help="list the misses of this split (default dev: tune on dev, report on test and holdout)",
        )

    def handle(self, *args, **options):
        result = poisoning.evaluate()
        splits = {"dev": ("dev",), "test": ("test",), "holdout": ("holdout",), "all": ("dev", "test", "holdout")}
        show = splits.get(options["show"], ())
        self.stdout.write("\n".join(poisoning.report_lines(result, show=show)))
        if options["json"]:
            with open(options["json"], "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=2, ensure_ascii=False)
                handle.write("\n")
            self.stdout.write(f"wrote {options['json']}")
