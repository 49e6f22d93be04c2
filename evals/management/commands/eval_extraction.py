import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from evals import extraction, training


class Command(BaseCommand):
    help = (
        "Score the offline extractor (the production extract_facts) against hand-labelled ConvAI2 utterances, "
        "and against the dataset's own triples on the same utterances."
    )

    def add_arguments(self, parser):
        parser.add_argument("--datasets", default=str(benchmarks.DEFAULT_DATASETS), help="the shared datasets folder")
        parser.add_argument("--gold", default=str(extraction.GOLD), help="the hand-labelled gold file")
        parser.add_argument(
            "--judgements",
            default=str(extraction.JUDGED),
            help="judged facts, for the share of written facts that are right",
        )
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument(
            "--show",
            choices=("dev", "test", "none"),
            default="none",
            help="list the utterances where the extractor and the gold disagree (choose on dev)",
        )

    def handle(self, *args, **o):
        started = time.monotonic()
        gold_path = Path(o["gold"])
        if not gold_path.is_file():
            raise CommandError(f"no gold file at {gold_path}")
        folder = Path(o["datasets"]) / training.CONVAI
        if not folder.is_dir():
            raise CommandError(f"the ConvAI2 dialogues are not under {folder} (pass --datasets)")
        rows = extraction.read_gold(gold_path)
        self.stderr.write(f"{len(rows)} labelled utterances; reading the dialogues under {o['datasets']}…")
        utterances = extraction.dataset_utterances(o["datasets"])
        result, examples = extraction.score(rows, utterances, extraction.read_judgements(o["judgements"]))
        if not result:
            raise CommandError("none of the gold file's utterances is in these datasets")
        self._print(result)
        if o["show"] != "none":
            for e in examples.get(o["show"], []):
                verdict = "missed" if e["gold"] else "extra"
                self.stdout.write(
                    f"\n[{verdict}] {e['utterance']}\n  written: {e['written']}\n  A: {e['annotators']['A']}"
                )
                self.stdout.write(f"  B: {e['annotators']['B']}")
        payload = {
            "benchmark": "eval_extraction",
            "gold": str(gold_path),
            "splits": result,
            "seconds": round(time.monotonic() - started, 1),
        }
        benchmarks.write_json(o["json_path"], payload)

    def _print(self, result):
        w = self.stdout.write
        for split, r in result.items():
            w(
                f"\n{split}: {r['utterances']} utterances ({r['gold_positive']} state a fact by the settled gold), "
                f"{r['facts_written']} facts written; annotators agree on {r['utterances'] - r['annotators_disagree']} "
                f"(kappa {r['annotator_agreement_kappa']})"
                + (f"; {r['missing']} not in these datasets" if r["missing"] else "")
                + "\n"
            )
            rows = [
                [gold, s["precision"], s["recall"], s["f1"], s["tp"], s["fp"], s["fn"]]
                for gold, s in r["against"].items()
            ]
            w(benchmarks.table(["gold", "precision", "recall", "F1", "tp", "fp", "fn"], rows) + "\n")
            f = r["facts"]
            w(
                f"facts written that are right, by every judge: {f['right']} / {f['judged']} judged"
                + (f" = {f['precision']} (each judge: {f['precision_by_judge']})" if f["precision"] is not None else "")
                + (f"; {f['unjudged']} written facts not judged yet" if f["unjudged"] else "")
                + "\n"
            )
