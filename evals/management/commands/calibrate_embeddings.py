from django.core.management.base import BaseCommand

from bench import common as benchmarks
from evals import floors as calibration
from evals import verdicts


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
        # The change floor is chosen on the dev split of the ConvAI2 verdict pairs; their test split is
        # what bench_verdicts reports.
        change_pairs = verdicts.read_pairs(split="valid")
        if options["smoke"]:
            change_pairs = _few_per_label(change_pairs, 3, labels=verdicts.LABELS)
        self.stderr.write(f"and {len(change_pairs)} ConvAI2 dev verdict pairs restated as changes…")
        report = calibration.calibrate(data, change_pairs)

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
                    ["change", report["floors"]["change"], "", "", report["change"]["rule"]],
                    ["recall", r["floor"], r["kept_positive"], r["kept_negative"], r["rule"]],
                ],
            )
            + "\n"
        )
        steps = [[x["from"], x["to"], x["stale_caught"], x["wrongly_superseded"]] for x in report["change"]["steps"]]
        pairs = report["change"]["pairs"]
        self.stdout.write(f"\nchange floor, {pairs} pairs: each step down from the neighbour floor\n")
        self.stdout.write(benchmarks.table(["from", "to", "stale values caught", "wrongly superseded"], steps) + "\n")
        self.stdout.write(
            f"\nrelevant fact scores above the irrelevant one for {report['ranking']['relevant_above_irrelevant']:.0%}"
            f" of messages; current defaults {report['current_defaults']}\n"
        )
        benchmarks.write_json(options["json_path"], {"benchmark": "calibrate_embeddings", **report})


def _few_per_label(pairs, n, labels=calibration.PAIR_LABELS):
    out = []
    for label in labels:
        out += [p for p in pairs if p["label"] == label][:n]
    return out
