import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from evals import locomo as lb

METHODS = ("vector", "bm25", "hybrid")


class Command(BaseCommand):
    help = "Retrieval quality on LoCoMo: hit@k and recall@k of evidence for vector, BM25 and hybrid recall."

    def add_arguments(self, parser):
        parser.add_argument(
            "--data",
            default=str(benchmarks.DEFAULT_DATASETS / "locomo" / "locomo10.json"),
            help="path to locomo10.json (read at run time, never copied)",
        )
        parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
        parser.add_argument("--keep", action="store_true", help="keep the loaded users and facts")
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument("--smoke", action="store_true", help="one conversation, 30 questions")

    def handle(self, *args, **o):
        path = Path(o["data"])
        if not path.exists():
            raise CommandError(f"{path} not found; pass --data or put the shared datasets next to the repo")
        conversations, questions = (1, 30) if o["smoke"] else (o["conversations"], None)
        started = time.monotonic()
        err = self.stderr
        err.write(f"loading {path.name}…")
        loaded = lb.load(path, conversations, questions, lambda label, n: benchmarks.Progress(label, n, err))
        try:
            load_seconds = time.monotonic() - started
            methods = {"bm25": lb.BM25(loaded.facts_by_sample), "hybrid": True}
            rows, block = lb.evaluate(loaded, methods, benchmarks.Progress("questions", len(loaded.questions), err))
            summary = lb.summarise(rows, METHODS)
        finally:
            if not o["keep"]:
                loaded.cleanup()
        results = {
            "benchmark": "bench_locomo",
            "smoke": o["smoke"],
            "facts": len(loaded.fact_dias),
            "questions": len(rows),
            "load_seconds": round(load_seconds, 1),
            "seconds": round(time.monotonic() - started, 1),
            "summary": summary,
            "block_tokens": {
                "vector_top10_mean": block[10],
                "vector_top20_mean": block[20],
                "mem0_per_query": lb.MEM0_TOKENS,
                "full_context": lb.FULL_CONTEXT_TOKENS,
            },
            "rrf_k": lb.RRF_K,
        }
        self._print(results)
        benchmarks.write_json(o["json_path"], results)

    def _print(self, r):
        w = self.stdout.write
        w(f"\nLoCoMo: {r['facts']} observation facts, {r['questions']} questions (categories 1-4)\n")
        for metric in ("recall", "hit"):
            headers = ["group", "n", "answerable"] + [f"{m} @{k}" for m in METHODS for k in lb.KS]
            rows = []
            for group, e in r["summary"].items():
                rows.append(
                    [group, e["n"], _pct(e["answerable"])]
                    + [_pct(e[f"{m}_{metric}@{k}"]) for m in METHODS for k in lb.KS]
                )
            w(f"\n{metric}@k of the evidence dia_ids (%)\n")
            w(benchmarks.table(headers, rows) + "\n")
        b = r["block_tokens"]
        w(
            f"\nmemory block, tokens (chars/4): top-10 {b['vector_top10_mean']:.0f}, "
            f"top-20 {b['vector_top20_mean']:.0f}  vs mem0 {b['mem0_per_query']:,} "
            f"and full context {b['full_context']:,}\n"
        )
        o = r["summary"]["overall"]
        gain = (o["hybrid_recall@10"] - o["vector_recall@10"]) * 100
        w(
            f"recall@10: vector {_pct(o['vector_recall@10'])}, BM25 {_pct(o['bm25_recall@10'])}, hybrid "
            f"{_pct(o['hybrid_recall@10'])} (hybrid - vector = {gain:+.1f} points); {r['seconds']} s\n"
        )


def _pct(x):
    return "-" if x is None else f"{x * 100:.1f}"
