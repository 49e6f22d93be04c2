from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from memoryapp import password_reset


class Command(BaseCommand):
    help = "Print a one-time link (valid 24 h) for a person to set a new password: the last resort, for any account."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="where the site is served")

    def handle(self, *args, username, url, **options):
        person = get_user_model().objects.filter(username=username).first()
        if person is None:
            raise CommandError(f"No account named {username!r}.")
        try:
            link, expires_at = password_reset.issue_link(None, person, url)
        except password_reset.NotAllowed as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Password reset link for {person.get_username()} "
            f"(works once, until {expires_at:%Y-%m-%d %H:%M} UTC):\n{link}"
        )
