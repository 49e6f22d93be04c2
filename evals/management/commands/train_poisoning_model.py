from django.core.management.base import BaseCommand

from evals import poisoning_model
from memoryapp import authority_model


class Command(BaseCommand):
    help = "Train the learned second stage of the fact validator on the poisoning corpus's dev split."

    def add_arguments(self, parser):
        parser.add_argument("--out", default=str(authority_model.WEIGHTS_PATH), help="where to write the .npz")

    def handle(self, *args, **options):
        poisoning_model.train(options["out"], say=self.stdout.write)
