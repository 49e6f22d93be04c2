import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from evals import verdicts as ve
from memoryapp import embeddings, writing


class Command(BaseCommand):
    help = "Score the offline verdict classifier and the neighbour floor on ConvAI2-derived pairs and DECODE."

    def add_arguments(self, parser):
        parser.add_argument("--datasets", default=str(benchmarks.DEFAULT_DATASETS), help="the shared datasets folder")
        parser.add_argument("--per-label", type=int, default=300, help="pairs per label per split")
        parser.add_argument(
            "--pairs",
            default=None,
            help=f"the pairs to score (default {ve.GENERATED.relative_to(benchmarks.BASE_DIR)}, the committed file, "
            "so the test pairs stay fixed when the phrasing code changes)",
        )
        parser.add_argument(
            "--regenerate",
            action="store_true",
            help="derive the pairs from the datasets again and write them (to --pairs-out, default the committed file)",
        )
        parser.add_argument(
            "--pairs-out", default=None, help="where --regenerate (or --smoke) writes the derived pairs"
        )
        parser.add_argument("--decode-limit", type=int, default=None, help="at most this many DECODE items per file")
        parser.add_argument("--floor", type=float, default=None, help="neighbour floor (default: the calibrated one)")
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument("--smoke", action="store_true", help="tiny sample, finishes in seconds")

    def handle(self, *args, **o):
        root = Path(o["datasets"])
        convai = root / "convai2_persona_triples"
        decode = root / "decode"
        if not convai.is_dir() or not decode.is_dir():
            raise CommandError(f"datasets not found under {root} (expected convai2_persona_triples/ and decode/)")
        per_label = 8 if o["smoke"] else o["per_label"]
        decode_limit = 16 if o["smoke"] else o["decode_limit"]
        floor = o["floor"] if o["floor"] is not None else embeddings.floor("neighbour")
        # As store_fact does: a new fact that announces a change gets the lower floor, unless one is given.
        floor_of = writing.neighbour_floor if o["floor"] is None else (lambda text: floor)
        started = time.monotonic()

        if o["regenerate"] or o["smoke"]:
            self.stderr.write("deriving pairs from ConvAI2 persona triples…")
            rows = ve.generate_pairs(convai, per_label)
            out = o["pairs_out"] or (None if o["smoke"] else ve.GENERATED)
            if out:
                ve.write_pairs(rows, out)
                self.stderr.write(f"wrote {len(rows)} pairs to {out}")
        else:
            path = Path(o["pairs"]) if o["pairs"] else ve.GENERATED
            if not path.is_file():
                raise CommandError(f"no pairs file at {path} (derive one with --regenerate)")
            rows = ve.read_pairs(path)
            self.stderr.write(f"scoring the {len(rows)} pairs in {path}")

        self.stderr.write("reading DECODE…")
        human_bot = ve.read_decode(decode / "human-bot.jsonl", decode_limit)
        rct = ve.read_decode(decode / "rct.jsonl", decode_limit)

        relabelled = ve.read_pairs(ve.RELABELLED)
        if o["smoke"]:
            relabelled = [r for split in ve.SPLITS for r in ve.read_pairs(ve.RELABELLED, split)[:12]]
        embedder = ve.Embedder()
        texts = {r["old"] for r in rows + relabelled} | {r["new"] for r in rows + relabelled}
        for items in (human_bot, rct):
            for history, last, _ in items:
                texts.update(history)
                texts.update(last)
        embedder.prime(texts, benchmarks.Progress("embedding", len(texts), self.stderr))

        results = {
            "benchmark": "bench_verdicts",
            "floor": floor,
            "change_floor": embeddings.floor("change") if o["floor"] is None else floor,
            "model": embeddings.model_name(),
            "pairs": {},
        }
        for split in ve.SPLITS:
            split_rows = [r for r in rows if r["split"] == split]
            results["pairs"][split] = ve.score_pairs(split_rows, embedder, floor_of)
        for split in ve.SPLITS:
            hand = [r for r in relabelled if r["split"] == split]
            results["pairs"][f"{split}, labelled by hand"] = ve.score_pairs(hand, embedder, floor_of)
        judged, limit = ve.read_pairs(ve.JUDGED), 12 if o["smoke"] else None
        self.stderr.write(f"scoring the hand-labelled pairs in {ve.JUDGED.name}…")
        results["judged"] = {
            split: ve.score_judged([r for r in judged if r["split"] == split][:limit]) for split in ve.JUDGED_SPLITS
        }
        self.stderr.write("scoring DECODE…")
        results["decode"] = {
            "human_bot": ve.score_decode(human_bot, embedder, floor_of),
            "rct": ve.score_decode(rct, embedder, floor_of),
        }
        results["seconds"] = round(time.monotonic() - started, 1)
        results["smoke"] = o["smoke"]
        self._print(results)
        benchmarks.write_json(o["json_path"], results)

    def _print(self, r):
        w = self.stdout.write
        for split, s in r["pairs"].items():
            for variant in ("classifier", "with_floor"):
                c = s[variant]
                title = (
                    "offline.classify"
                    if variant == "classifier"
                    else f"neighbour floor {r['floor']} ({r['change_floor']} for a change) + classify"
                )
                w(f"\nConvAI2 pairs ({split}): {title} (rows gold, columns predicted)\n")
                rows = [[g] + [c["matrix"][g][p] for p in ve.LABELS] + [c["per_label"][g]["f1"]] for g in ve.LABELS]
                w(benchmarks.table(["gold \\ predicted", *ve.LABELS, "F1"], rows) + "\n")
                w(f"macro-F1 {c['macro_f1']}  accuracy {c['accuracy']}  n={c['n']}\n")
            w(f"pairs passing the floor: {s['passing_floor']}  median cosine: {s['median_similarity']}\n")
            sweep = [[f] + [v.get(label) for label in ve.LABELS] for f, v in s["floor_sweep"].items()]
            w(f"\nshare of {split} pairs at or above each neighbour floor\n")
            w(benchmarks.table(["floor", *ve.LABELS], sweep) + "\n")
        for split, c in r["judged"].items():
            w(
                f"\nPairs the write path judged on LoCoMo ({split}: {c['pairs_labelled']} labelled by hand, "
                f"weighted to the {c['n']} pairs of that run; rows gold, columns predicted)\n"
            )
            rows = [[g] + [c["matrix"][g][p] for p in ve.LABELS] + [c["per_label"][g]["f1"]] for g in ve.LABELS]
            w(benchmarks.table(["gold \\ predicted", *ve.LABELS, "F1"], rows) + "\n")
            precision = {label: c["per_label"][label]["precision"] for label in ("DUPLICATE", "CONTRADICTS")}
            w(f"macro-F1 {c['macro_f1']}  share of calls that are right: {precision}\n")
        w("\nDECODE\n")
        rows = []
        for name, d in r["decode"].items():
            for variant, v in d.items():
                rows.append(
                    [name, variant, v["n"], v["accuracy"], v["false_contradicts_rate"], v["contradiction_recall"]]
                )
        w(benchmarks.table(["set", "variant", "n", "accuracy", "false CONTRADICTS", "contradiction recall"], rows))
        w(f"\n\n{r['seconds']} s\n")
