# Recall and neighbour search rank by a half-precision copy of each fact's vector, and the covering
# index holds that copy (instead of the full vector) and the text recall shows: a cold user's live
# facts sit on half the leaf pages, and the chosen ones are no longer read from the heap.
#
# Why a trigger and not a generated column: adding a stored generated column rewrites the table under
# a lock that stops reads and writes (108 s at 3M facts). Here every step lets them go on: the column
# is added empty, a trigger fills it on every write from then on, old rows are filled in short
# batches, the index is built and the old one dropped CONCURRENTLY, and a vacuum sets the visibility
# map that index-only scans need.

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

import pgvector.django.halfvec

KEEP_UP = """
CREATE FUNCTION memoryapp_fact_half() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.embedding_half := NEW.embedding::halfvec;
    RETURN NEW;
END $$;
CREATE TRIGGER fact_half BEFORE INSERT OR UPDATE OF embedding, embedding_half ON memoryapp_memoryfact
    FOR EACH ROW EXECUTE FUNCTION memoryapp_fact_half();
"""
DROP_KEEP_UP = "DROP TRIGGER fact_half ON memoryapp_memoryfact; DROP FUNCTION memoryapp_fact_half();"
BATCH_BLOCKS = 2000  # heap pages per batch: about 10,000 facts, each batch its own short transaction


def fill_old_rows(apps, schema_editor):
    """Fill the copy for rows written before the trigger, a range of heap pages at a time."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size('memoryapp_memoryfact') / current_setting('block_size')::int")
        blocks = cursor.fetchone()[0]
        for start in range(0, blocks + 1, BATCH_BLOCKS):
            cursor.execute(
                "UPDATE memoryapp_memoryfact SET embedding_half = embedding::halfvec"
                " WHERE ctid >= %s::tid AND ctid < %s::tid AND embedding IS NOT NULL AND embedding_half IS NULL",
                [f"({start},0)", f"({start + BATCH_BLOCKS},0)"],
            )


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY and VACUUM cannot run inside a transaction

    dependencies = [
        ("memoryapp", "0016_fact_user_recall_idx"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryfact",
            name="embedding_half",
            field=pgvector.django.halfvec.HalfVectorField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(KEEP_UP, DROP_KEEP_UP),
        migrations.RunPython(fill_old_rows, migrations.RunPython.noop),
        AddIndexConcurrently(
            model_name="memoryfact",
            index=models.Index(
                condition=models.Q(("expired_at__isnull", True), ("superseded_at__isnull", True)),
                fields=["user", "kind", "-last_confirmed_at"],
                include=(
                    "id",
                    "org",
                    "scope",
                    "text",
                    "created_at",
                    "confirmation_count",
                    "embedding_model",
                    "embedding_half",
                    "search_vector",
                ),
                name="fact_user_recall_half",
            ),
        ),
        RemoveIndexConcurrently(model_name="memoryfact", name="fact_user_recall_idx"),
        migrations.RenameIndex(
            model_name="memoryfact", new_name="fact_user_recall_idx", old_name="fact_user_recall_half"
        ),
        # Why a vacuum: until the visibility map is set, an index-only scan still visits every fact's
        # heap page (about 290 scattered reads for a cold user at 3M facts); VACUUM lets writes go on.
        migrations.RunSQL("VACUUM (ANALYZE) memoryapp_memoryfact", migrations.RunSQL.noop),
    ]
