import django.contrib.postgres.fields
from django.db import migrations, models

import memoryapp.models


def keep_portal_links_working(apps, schema_editor):
    """Existing keys keep exactly the powers they had.

    Until this migration, minting a portal link (`POST /users/{user}/portal`) needed only `read`.
    It is now its own scope, `portal`; a key that had `read` could mint links, so it gets `portal`
    too. Taking it away silently would break agents that rely on it; an org admin who does not
    want it can revoke the key and make a narrower one. Keys created from now on start without it.
    """
    ApiKey = apps.get_model("memoryapp", "ApiKey")
    for key in ApiKey.objects.filter(scopes__contains=["read"]).exclude(scopes__contains=["portal"]):
        key.scopes = [*key.scopes, "portal"]
        key.save(update_fields=["scopes"])


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0010_rate_counters"),
    ]

    operations = [
        migrations.AlterField(
            model_name="apikey",
            name="scopes",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    choices=[("read", "Read"), ("write", "Write"), ("erase", "Erase"), ("portal", "Portal")],
                    max_length=10,
                ),
                default=memoryapp.models.default_scopes,
                size=None,
            ),
        ),
        migrations.RunPython(keep_portal_links_working, migrations.RunPython.noop),
    ]
