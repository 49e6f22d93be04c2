# Recall reads a user's live facts from one covering index (an index-only scan), not from the heap.
# Built CONCURRENTLY, then the index it replaces dropped CONCURRENTLY: writes go on throughout.

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("memoryapp", "0015_search_folds_accents"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="memoryfact",
            index=models.Index(
                condition=models.Q(("expired_at__isnull", True), ("superseded_at__isnull", True)),
                fields=["user", "kind", "-last_confirmed_at"],
                include=("id", "scope", "confirmation_count", "embedding_model", "embedding", "search_vector"),
                name="fact_user_recall_idx",
            ),
        ),
        RemoveIndexConcurrently(model_name="memoryfact", name="fact_user_live_idx"),
    ]
