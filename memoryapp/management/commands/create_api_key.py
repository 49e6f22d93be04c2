from django.core.management.base import BaseCommand, CommandError

from memoryapp import sessions
from memoryapp.models import Organization, Scope, default_scopes


class Command(BaseCommand):
    help = "Create an API key for an organisation and print it once."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="organisation slug")
        parser.add_argument("--name", required=True, help="a name for the key, e.g. 'support bot'")
        parser.add_argument("--create-org", action="store_true", help="create the organisation if missing")
        parser.add_argument(
            "--scopes",
            default=",".join(default_scopes()),
            help="what the key may do, comma-separated: read, write, erase, portal (default: read,write)",
        )

    def handle(self, *args, org, name, create_org, scopes, **options):
        chosen = [s.strip() for s in scopes.split(",") if s.strip()]
        if not chosen or any(s not in Scope.values for s in chosen):
            raise CommandError(f"--scopes: choose from {', '.join(Scope.values)} (comma-separated).")
        organisation = Organization.objects.filter(slug=org).first()
        if organisation is None:
            if not create_org:
                raise CommandError(f"No organisation with slug {org!r} (pass --create-org to create it).")
            organisation = Organization.objects.create(slug=org, name=org.replace("-", " ").title())
        api_key, key = sessions.create_api_key(organisation, name[:100], chosen)
        may = ", ".join(api_key.scopes)
        self.stdout.write(f"API key for {organisation.slug} ({api_key.name}; may {may}), shown only once:\n{key}")
