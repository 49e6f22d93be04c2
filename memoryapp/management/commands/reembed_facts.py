"""Re-embed stored facts after a change of embedding model: `manage.py reembed_facts [--batch N]`."""

from django.core.management.base import BaseCommand, CommandError

from memoryapp import embeddings, writing


class Command(BaseCommand):
    help = (
        "Give every fact a vector of the active embedding model. Recall compares only vectors of one "
        "model, so facts embedded by another reach tier 2 again only after this."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=256, help="facts embedded per model call (default 256)")

    def handle(self, *args, batch, **options):
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        self.stdout.write(f"Re-embedding facts with {embeddings.model_name()}.")

        shown = set()

        def progress(done, total):
            pct = int(100 * done / total) if total else 100
            if pct not in shown:  # one line per percent, however many batches
                shown.add(pct)
                self.stdout.write(f"  {done:,}/{total:,} facts ({pct}%)")

        count = writing.reembed_facts(batch=batch, progress=progress)
        self.stdout.write(self.style.SUCCESS(f"{count:,} fact{'' if count == 1 else 's'} re-embedded."))
