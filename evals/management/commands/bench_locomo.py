import os
import time

from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from bench import common as benchmarks
from evals import judge
from evals import locomo as lb
from evals import locomo_pipeline as pipeline
from memoryapp.backends import BACKENDS


class Command(BaseCommand):
    help = (
        "Memory quality on LoCoMo through the production code. --pipeline: every conversation through "
        "sessions, extraction and supersession, questions through recall; without it: LoCoMo's gold "
        "observations as facts (a retrieval-only upper bound), questions through the same recall."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--data",
            default=str(benchmarks.DEFAULT_DATASETS / "locomo" / "locomo10.json"),
            help="path to locomo10.json (read at run time, never copied)",
        )
        parser.add_argument("--pipeline", action="store_true", help="end to end: extract facts from the dialogue")
        parser.add_argument("--backend", choices=sorted(BACKENDS), default="offline", help="extraction backend")
        parser.add_argument(
            "--split", choices=sorted(lb.SPLITS), default="dev", help="dev = conversations 1-5, test = 6-10"
        )
        parser.add_argument("--conversations", help="comma-separated conversation numbers (1-10), instead of --split")
        parser.add_argument(
            "--variants",
            help=f"comma-separated recall variants (default: all of {', '.join(lb.VARIANTS)})",
        )
        parser.add_argument(
            "--judge",
            choices=("auto", "off"),
            default="auto",
            help="QA accuracy by an LLM judge on the production block: auto = when a model key or endpoint is set",
        )
        parser.add_argument("--keep", action="store_true", help="keep the users and facts written")
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument("--smoke", action="store_true", help="the first conversation and 30 questions only")

    def handle(self, *args, **o):
        conversations = [int(c) for c in o["conversations"].split(",")] if o["conversations"] else None
        if o["smoke"]:
            conversations = conversations or [1]
        try:
            samples = lb.read(o["data"], o["split"], conversations)
        except lb.DatasetMissing as exc:
            raise CommandError(str(exc)) from exc
        if not samples:
            raise CommandError("no conversation selected")
        names = [v.strip() for v in o["variants"].split(",")] if o["variants"] else list(lb.VARIANTS)
        unknown = [v for v in names if v not in lb.VARIANTS]
        if unknown:
            raise CommandError(f"unknown variant(s) {unknown}; choose from {list(lb.VARIANTS)}")
        variants = {v: lb.VARIANTS[v] for v in names}
        benchmarks.migrate_first(self.stderr)
        started = time.monotonic()
        err = self.stderr
        if o["pipeline"]:
            results = self._pipeline(samples, variants, o, err)
        else:
            results = self._observations(samples, variants, o, err)
        results.update(
            {
                "benchmark": "bench_locomo",
                "mode": "pipeline" if o["pipeline"] else "observations",
                "split": "custom" if conversations else o["split"],
                "conversations": [n for n, _ in samples],
                "smoke": o["smoke"],
                "variants": {v: lb.VARIANTS[v] for v in names},
                "token_estimate": f"characters of the rendered block / {lb.CHARS_PER_TOKEN}",
                "seconds": round(time.monotonic() - started, 1),
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            }
        )
        self._print(results)
        benchmarks.write_json(o["json_path"], results)

    def _questions(self, questions, o):
        return questions[:30] if o["smoke"] else questions

    def _observations(self, samples, variants, o, err):
        err.write(f"loading observations of conversations {[n for n, _ in samples]}…")
        loaded = lb.load_observations(samples, lambda label, n: benchmarks.Progress(label, n, err))
        try:
            questions = self._questions(loaded.questions, o)
            rows = lb.evaluate(
                questions, loaded.fact_dias, variants, benchmarks.Progress("questions", len(questions), err)
            )
            ceiling = lb.answerable(questions, loaded.fact_dias, lb.facts_by_user(loaded.fact_dias))
        finally:
            if not o["keep"]:
                loaded.cleanup()
        return {
            "facts": loaded.facts,
            "questions": len(rows),
            "answerable": ceiling,
            "summary": lb.summarise(rows, variants),
        }

    def _pipeline(self, samples, variants, o, err):
        run = pipeline.new_run()
        try:
            with override_settings(EXTRACTION_BACKEND=o["backend"]):
                for number, sample in samples:
                    n_sessions = len(lb.sessions_of(sample))
                    progress = benchmarks.Progress(f"conversation {number}: sessions", n_sessions, err)
                    pipeline.ingest(run, number, sample, progress)
            facts = run.fact_dias()
            stats = pipeline.stats(run)
            questions = self._questions(run.questions, o)
            with pipeline.clock_at(run.last_date):
                rows = lb.evaluate(questions, facts, variants, benchmarks.Progress("questions", len(questions), err))
            ceiling = lb.answerable(questions, facts, lb.facts_by_user(facts))
        finally:
            if not o["keep"]:
                run.cleanup()
        return {
            "backend": o["backend"],
            "extraction": stats,
            "questions": len(rows),
            "answerable": ceiling,
            "summary": lb.summarise(rows, variants),
            **self._judge(rows, o, err),
        }

    def _judge(self, rows, o, err):
        """LLM-judged QA accuracy (categories 1-4) where a model is configured; otherwise say why not."""
        provider = judge.available() if o["judge"] == "auto" else None
        if provider is None:
            why = "--judge off" if o["judge"] == "off" else "no ANTHROPIC_API_KEY or OPENAI_BASE_URL/OPENAI_API_KEY"
            return {
                "qa_accuracy": None,
                "qa_accuracy_note": f"not measured ({why}); mem0 publishes {lb.MEM0_JUDGE_ACCURACY}",
            }
        if not any("block" in r for r in rows):
            return {"qa_accuracy": None, "qa_accuracy_note": f"not measured (variant {lb.JUDGED_VARIANT!r} not run)"}
        items = [(r["question"], str(r["answer"]), r["block"]) for r in rows if r["category"] != 5 and r["answer"]]
        result = judge.accuracy(provider, items, benchmarks.Progress("judging", len(items), err))
        return {
            "qa_accuracy": result,
            "qa_accuracy_note": f"{lb.JUDGED_VARIANT} block; mem0 publishes {lb.MEM0_JUDGE_ACCURACY}",
        }

    def _print(self, r):
        w = self.stdout.write
        head = f"\nLoCoMo {r['mode']}, conversations {r['conversations']} ({r['split']}), {r['questions']} questions"
        if r["mode"] == "pipeline":
            e = r["extraction"]
            head += (
                f"\nbackend {r['backend']} ({', '.join(e['models'])}): {e['sessions']} sessions, "
                f"{e['facts_created']} facts written ({e['facts_per_session_mean']} per session), "
                f"{e['supersessions']} supersessions, {e['confirmations']} confirmations, "
                f"{e['live_facts']} live; extraction tokens per session {e['extraction_tokens_per_session_mean']}, "
                f"cost ${e['extraction_cost_usd_total']:.4f}"
            )
        else:
            head += f", {r['facts']} observation facts"
        w(head + f"\nanswerable (some fact carries the evidence): {_pct(r['answerable'])} %\n")
        groups = [g for g in next(iter(r["summary"].values())) if g not in ("block",) and not g.startswith("5")]
        headers = ["variant"] + groups + ["5 adv: similar fact", "tokens p50", "p95"]
        rows = []
        for name, per in r["summary"].items():
            adv = per.get("5 adversarial", {})
            rows.append(
                [name]
                + [_pct(per[g]["evidence_found"]) for g in groups]
                + [_pct(adv.get("holds_similar_fact")), per["block"]["tokens_p50"], per["block"]["tokens_p95"]]
            )
        w("\nevidence found in the block (% of questions whose gold evidence is among its facts' source turns)\n")
        w(benchmarks.table(headers, rows) + "\n")
        if r["mode"] == "pipeline":
            qa = r["qa_accuracy"]
            if qa is None:
                w(f"QA accuracy: {r['qa_accuracy_note']}\n")
            else:
                w(
                    f"QA accuracy (LLM judge, {qa['provider']}): {_pct(qa['accuracy'])} % of {qa['n']} "
                    f"({r['qa_accuracy_note']}); {qa['input_tokens']:,} in / {qa['output_tokens']:,} out tokens, "
                    f"${qa['cost_usd']:.4f}\n"
                )
        w(f"{r['seconds']} s; mem0 uses {lb.MEM0_TOKENS:,} tokens per query\n")


def _pct(x):
    return "-" if x is None else f"{x * 100:.1f}"
