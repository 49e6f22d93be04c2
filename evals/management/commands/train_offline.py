import json
import re
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from evals import training
from memoryapp.backends import learned


class Command(BaseCommand):
    help = (
        "Retrain the learned offline backend (fact, kind and verdict models) from the shared public datasets, "
        "reproducibly (fixed seed), print dev and test metrics, and write the weights (float16 .npz)."
    )

    def add_arguments(self, parser):
        default = Path(settings.BASE_DIR).parent / "shared" / "datasets"
        parser.add_argument("--datasets", default=str(default), help=f"the shared datasets folder (default {default})")
        parser.add_argument("--out", default=None, help=f"where to write the weights (default {learned.WEIGHTS_PATH})")
        parser.add_argument(
            "--cache", default=None, help="an .npz to keep sentence vectors in between runs (e.g. /tmp/x.npz)"
        )
        parser.add_argument("--seed", type=int, default=training.SEED)
        parser.add_argument("--json", dest="json_path", help="write the metrics here")
        parser.add_argument(
            "--smoke", action="store_true", help="a tiny sample, finishes in seconds (weights not shipped)"
        )
        parser.add_argument(
            "--no-pin", action="store_true", help="do not write the new sha256 into memoryapp/backends/learned.py"
        )

    def handle(self, *args, **o):

        out = Path(o["out"]) if o["out"] else (None if o["smoke"] else learned.WEIGHTS_PATH)
        if out is None:
            raise CommandError("--smoke needs --out (smoke weights are never written over the shipped ones)")
        started = time.monotonic()
        try:
            metrics = training.train(
                o["datasets"],
                out,
                cache_path=o["cache"],
                smoke=o["smoke"],
                progress=lambda label, total: benchmarks.Progress(label, total, self.stderr),
                say=lambda line: self.stderr.write(line),
                seed=o["seed"],
            )
        except training.MissingData as exc:
            raise CommandError(str(exc)) from None
        metrics["seconds"] = round(time.monotonic() - started, 1)
        digest = metrics["weights"]["sha256"]
        if out.resolve() == learned.WEIGHTS_PATH.resolve() and not o["no_pin"]:
            source = Path(learned.__file__)
            text = source.read_text()
            source.write_text(re.sub(r'WEIGHTS_SHA256 = "[0-9a-f]{64}"', f'WEIGHTS_SHA256 = "{digest}"', text))
            self.stderr.write(f"pinned sha256 {digest} in {source}")
        self.stdout.write(json.dumps({k: metrics[k] for k in metrics if k != "weights"}, indent=2))
        self.stdout.write(f"weights: {out} ({metrics['weights']['bytes']:,} bytes, sha256 {digest})")
        if o["json_path"]:
            Path(o["json_path"]).write_text(json.dumps(metrics, indent=2) + "\n")
