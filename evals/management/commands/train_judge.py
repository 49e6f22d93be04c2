from django.core.management.base import BaseCommand

from evals import judge_training
from memoryapp import judge_model


class Command(BaseCommand):
    help = "Train the learned judge of candidate facts; choose its thresholds on the dev split and print its metrics."

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, default=0, help="seed of the folds, the MSC sample and the MLP start")
        parser.add_argument("--out", default=str(judge_model.WEIGHTS_PATH), help="where to write the .npz")
        parser.add_argument(
            "--data", help="a folder of {attacks,benign,holdout_*,training_*}.jsonl (default: the repo's)"
        )
        parser.add_argument("--no-msc", action="store_true", help="leave out the MSC and ConvAI2 persona sentences")
        parser.add_argument("--vectors", default="minilm,qint8", help="the MiniLM vector kinds to train on")
        parser.add_argument(
            "--more-dev",
            help="a corpus folder measured before ({attacks,benign}.jsonl, as eval_poisoning --corpus reads) whose api"
            " rows, never trained on, join the dev rows the thresholds are chosen on (default: outside/ in the"
            " corpus folder, when there is one; 'none' for none)",
        )
        parser.add_argument(
            "--cache", help="path prefix of .npz files that keep the vectors between runs (outside the repo)"
        )

    def handle(self, *args, **options):
        if options["data"]:
            rows, dev = judge_training.corpus_rows(options["data"])
        else:
            rows, dev = judge_training.corpus_rows()
        if not options["no_msc"]:
            rows += judge_training.msc_rows(seed=options["seed"]) + judge_training.convai2_rows()
        judge_training.train(
            options["out"],
            seed=options["seed"],
            rows=rows,
            dev=dev,
            kinds=tuple(options["vectors"].split(",")),
            cache=options["cache"],
            say=self.stdout.write,
            more_dev=judge_training.more_dev_rows(options["more_dev"] or judge_training.outside_dir(options["data"])),
        )
