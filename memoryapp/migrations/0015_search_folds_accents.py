# Search and recall's word side fold accents: "cafe" finds "café".

import django.contrib.postgres.search
from django.contrib.postgres.operations import UnaccentExtension
from django.db import migrations, models

# English stemming as before, with the unaccent dictionary in front of it for word tokens.
CREATE_CONFIG = """
CREATE TEXT SEARCH CONFIGURATION memory_english (COPY = english);
ALTER TEXT SEARCH CONFIGURATION memory_english
    ALTER MAPPING FOR hword, hword_part, word WITH unaccent, english_stem;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('memoryapp', '0014_password_reset_links'),
    ]

    operations = [
        UnaccentExtension(),
        migrations.RunSQL(CREATE_CONFIG, "DROP TEXT SEARCH CONFIGURATION memory_english;"),
        # A generated column's expression cannot be altered in place: it is dropped and made again.
        migrations.RemoveField(model_name='memoryfact', name='search_vector'),
        migrations.AddField(
            model_name='memoryfact',
            name='search_vector',
            field=models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector('text', config='memory_english'), output_field=django.contrib.postgres.search.SearchVectorField()),
        ),
    ]
