import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from evals import ablation, extraction, training
from memoryapp.backends import rules


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
        parser.add_argument(
            "--ablate",
            action="store_true",
            help="for every hand rule (memoryapp/backends/rules.py), what removing it does on the dev split",
        )
        parser.add_argument("--rules", help="with --ablate: only these rule ids (comma-separated)")
        parser.add_argument("--pairs", type=int, help="with --ablate: only the first N relabelled valid pairs")
        parser.add_argument(
            "--scenarios",
            nargs="?",
            const=str(ablation.SCENARIOS),
            help="with --ablate: also the scenarios (default folder evals/scenarios) under the offline backend",
        )
        parser.add_argument(
            "--prune",
            action="store_true",
            help="with --ablate: choose greedily the rules that can go together without a dev measure falling",
        )
        parser.add_argument("--keep", default="", help="with --prune: rule ids that stay (comma-separated)")

    def handle(self, *args, **o):
        started = time.monotonic()
        gold_path = Path(o["gold"])
        if not gold_path.is_file():
            raise CommandError(f"no gold file at {gold_path}")
        folder = Path(o["datasets"]) / training.CONVAI
        if not folder.is_dir():
            raise CommandError(f"the ConvAI2 dialogues are not under {folder} (pass --datasets)")
        if o["ablate"]:
            return self._ablate(o, gold_path, started)
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

    def _ablate(self, o, gold_path, started):
        ids = [i.strip() for i in o["rules"].split(",") if i.strip()] if o["rules"] else list(rules.TABLE)
        unknown = sorted(set(ids) - set(rules.TABLE))
        if unknown:
            raise CommandError(f"no rule {', '.join(unknown)} (the ids are in memoryapp/backends/rules.py)")
        if o["scenarios"]:
            benchmarks.migrate_first(self.stderr)
        dev = ablation.load_dev(
            o["datasets"],
            gold=gold_path,
            scenarios=[o["scenarios"]] if o["scenarios"] else (),
            limit_pairs=o["pairs"],
        )
        self.stderr.write(
            f"dev: {len(dev.gold)} gold utterances, {len(dev.pairs)} relabelled pairs, {len(dev.scenarios)} scenarios"
        )
        with ablation.remembered_embeddings():
            self._ablation_run(o, dev, ids, started)

    def _ablation_run(self, o, dev, ids, started):
        baseline, single, fired = ablation.ablate(dev, ids, lambda i, r: self.stderr.write(f"  {i}: {r}"))
        w = self.stdout.write
        w(f"\ndev baseline: {baseline}\n")
        rows = []
        for rule_id, r in single.items():
            moved = [f"{m} {r[m] - baseline[m]:+.3g}" for m in ablation.MEASURES if r[m] != baseline[m]]
            if not any(rule_id in seen for seen in fired.values()):
                moved = ["never fires on dev"]
            rows.append([rule_id, *(r[m] for m in ablation.MEASURES), "; ".join(moved) or "no change"])
        w(benchmarks.table(["rule", *ablation.MEASURES, "removing it"], rows) + "\n")
        payload = {
            "benchmark": "eval_extraction --ablate",
            "dev": {"utterances": len(dev.gold), "pairs": len(dev.pairs), "scenarios": len(dev.scenarios)},
            "baseline": baseline,
            "rules": {
                i: {
                    "description": rules.TABLE[i].description,
                    "without": single[i],
                    "fires": sorted(name for name, seen in fired.items() if i in seen),
                }
                for i in single
            },
        }
        if o["prune"]:
            keep = {i.strip() for i in o["keep"].split(",") if i.strip()}
            off, result = ablation.prune(
                dev, baseline, single, fired, keep, lambda i, r, kept: self.stderr.write(f"  prune {i}: {r} off={kept}")
            )
            w(f"\nremovable together ({len(off)}): {', '.join(off)}\nwith them all off: {result}\n")
            payload["prune"] = {"off": off, "kept_for_tests": sorted(keep), "with_all_off": result}
        payload["seconds"] = round(time.monotonic() - started, 1)
        benchmarks.write_json(o["json_path"], payload)
