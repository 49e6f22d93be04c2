from django.core.management.base import BaseCommand

from bench import common as benchmarks
from evals import floors as calibration


class Command(BaseCommand):
    help = "Measure similarity distributions on the labelled set and the floors that separate them."

    def add_arguments(self, parser):
        parser.add_argument("--set", default=str(calibration.DEFAULT_SET), help="labelled pairs/triples JSON")
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument("--smoke", action="store_true", help="a handful of items, to check the command runs")

    def handle(self, *args, **options):
        data = calibration.load_set(options["set"])
        if options["smoke"]:
            data = {"pairs": _few_per_label(data["pairs"], 3), "triples": data["triples"][:4]}
        self.stderr.write(f"embedding {len(data['pairs'])} pairs and {len(data['triples'])} triples…")
        report = calibration.calibrate(data)

        rows = []
        for name, d in report["distributions"].items():
            rows.append([name, d["n"], d["min"], d["p5"], d["p25"], d["median"], d["p75"], d["p95"], d["max"]])
        self.stdout.write(f"cosine similarity with {report['model']}\n")
        self.stdout.write(
            benchmarks.table(["set", "n", "min", "p5", "p25", "median", "p75", "p95", "max"], rows) + "\n\n"
        )
        n, r = report["neighbour"], report["recall"]
        self.stdout.write(
            benchmarks.table(
                ["floor", "value", "kept (should pass)", "kept (should not)", "rule"],
                [
                    ["neighbour", n["floor"], n["kept_positive"], n["kept_negative"], n["rule"]],
                    ["recall", r["floor"], r["kept_positive"], r["kept_negative"], r["rule"]],
                ],
            )
            + "\n"
        )
        self.stdout.write(
            f"\nrelevant fact scores above the irrelevant one for {report['ranking']['relevant_above_irrelevant']:.0%}"
            f" of messages; current defaults {report['current_defaults']}\n"
        )
        benchmarks.write_json(options["json_path"], {"benchmark": "calibrate_embeddings", **report})


def _few_per_label(pairs, n):
    out = []
    for label in calibration.PAIR_LABELS:
        out += [p for p in pairs if p["label"] == label][:n]
    return out
