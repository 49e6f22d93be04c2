import json

from django.core.management.base import BaseCommand, CommandError

from evals import locomo, poisoning
from memoryapp import validation


class Command(BaseCommand):
    help = (
        "Poisoning corpus: attacks that would reach a block, benign facts refused and pending, per path and language."
    )

    def add_arguments(self, parser):
        parser.add_argument("--split", choices=poisoning.SPLITS, default="test", help="the corpus split (default test)")
        parser.add_argument("--corpus", metavar="DIR", help="an external corpus: DIR/{attacks,benign}.jsonl, every row")
        parser.add_argument("--json", metavar="FILE", help="also write the full result as JSON to FILE")
        parser.add_argument("--show-misses", action="store_true", help="list stored attacks and held benign facts")
        parser.add_argument(
            "--counts-only",
            action="store_true",
            help="no row's text in the output or the JSON: a fresh corpus measured blind stays unread",
        )
        parser.add_argument(
            "--said-bars",
            metavar="B[/M],...",
            help="instead: the chat rows' attacks stored and benign pending at each sentence bar B (validation."
            "SAID_THRESHOLD) and message bar M (MESSAGE_THRESHOLD, the shipped one when left out; 1 for none),"
            " chosen on dev chat rows: --corpus evals/poisoning/outside and outside_next",
        )
        parser.add_argument(
            "--locomo",
            metavar="FILE",
            help="with --said-bars: also the facts held from 1,000 of LoCoMo's dev turns, ordinary chat"
            " (e.g. ../shared/datasets/locomo/locomo10.json)",
        )

    def handle(self, *args, **options):
        if options["counts_only"] and options["show_misses"]:
            raise CommandError("--counts-only and --show-misses contradict each other")
        attacks, benign = poisoning.corpus(options["split"], options["corpus"])
        if options["said_bars"]:
            try:
                bars = [_bars(b) for b in options["said_bars"].split(",")]
            except ValueError as exc:
                raise CommandError("--said-bars takes bars separated by commas, e.g. 0.4,0.45/0.8,0.5") from exc
            try:
                ordinary = poisoning.locomo_turns(options["locomo"]) if options["locomo"] else []
            except locomo.DatasetMissing as exc:
                raise CommandError(f"--locomo: {options['locomo']} not found (LoCoMo's locomo10.json)") from exc
            self.stdout.write(
                "sentence/message bar  chat attacks stored  chat benign pending"
                + ("  LoCoMo turns held" if ordinary else "")
            )
            for (bar, message_bar), stored, pending, n_attacks, n_benign, held, with_a_fact in poisoning.said_bars(
                attacks, benign, bars, ordinary
            ):
                line = f"{bar:>12.2f}/{message_bar:<7.2f}  {stored:>8} of {n_attacks:<8}  {pending:>8} of {n_benign:<8}"
                self.stdout.write((line + (f"  {held:>8} of {with_a_fact}" if ordinary else "")).rstrip())
            return
        result = poisoning.evaluate(attacks, benign)
        if options["counts_only"]:
            for name in ("attacks", "benign"):
                result[name].pop("misses")
        where = options["corpus"] or f"evals/poisoning/, {options['split']} split"
        self.stdout.write(f"{len(attacks)} attacks and {len(benign)} benign rows ({where})")
        self.stdout.write("\n".join(poisoning.report_lines(result, show_misses=options["show_misses"])))
        if options["json"]:
            with open(options["json"], "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=2, ensure_ascii=False)
                handle.write("\n")
            self.stdout.write(f"wrote {options['json']}")


def _bars(text):
    """'0.4' or '0.4/0.8' -> (sentence bar, message bar); a bare sentence bar takes the shipped message bar."""
    bar, _, message_bar = text.partition("/")
    return float(bar), float(message_bar) if message_bar else validation.MESSAGE_THRESHOLD
