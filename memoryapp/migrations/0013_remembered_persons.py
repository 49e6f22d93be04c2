"""Who is who: people an org's agents remember stop being org members (issue 41).

Before this, the API gave every person it created for an external id a `member` Membership (so
recall could add the org tier), and an admin could even make them an admin. Now a remembered
person is known only by their ExternalIdentity; Membership is for people who joined by invitation
and sign in. This moves today's rows: the memberships of people who cannot sign in and whom an
agent knows by an id are removed (no fact, session, turn or event is touched), and an org left with
no admin who can sign in gets its longest-standing member who can sign in as admin.
"""

from django.db import migrations, models


def _cannot_sign_in(User):
    return User.objects.filter(
        models.Q(password__startswith="!") | models.Q(password="") | models.Q(is_active=False),
        is_staff=False,
        is_superuser=False,
    )


def forward(apps, schema_editor):
    User = apps.get_model("auth", "User")
    Membership = apps.get_model("memoryapp", "Membership")
    ExternalIdentity = apps.get_model("memoryapp", "ExternalIdentity")
    remembered = _cannot_sign_in(User).filter(
        id__in=ExternalIdentity.objects.values("user_id")
    ).values("id")
    touched = set(Membership.objects.filter(user_id__in=remembered).values_list("org_id", flat=True))
    Membership.objects.filter(user_id__in=remembered).delete()
    unable = _cannot_sign_in(User).values("id")
    for org_id in sorted(touched):
        admins = Membership.objects.filter(org_id=org_id, role="admin").exclude(user_id__in=unable)
        if admins.exists():
            continue
        first = Membership.objects.filter(org_id=org_id).exclude(user_id__in=unable).order_by("created_at", "id").first()
        if first is not None:
            Membership.objects.filter(id=first.id).update(role="admin")


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0012_sign_ins"),
    ]

    operations = [
        migrations.AddField(
            model_name="externalidentity",
            name="linked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="erasurereceipt",
            name="identities",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
