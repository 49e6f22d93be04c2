"""Erase one person and everything held about them: `manage.py erase_user USERNAME` or `--org SLUG --external-id ID`."""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from memoryapp import erasure, sessions
from memoryapp.models import Organization


class Command(BaseCommand):
    help = "Erase a person's account and memory through the one erasure path, and print the receipt."

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", help="the account's username")
        parser.add_argument("--org", help="organisation slug, with --external-id")
        parser.add_argument("--external-id", help="the agent's id for the person in --org")
        parser.add_argument(
            "--noinput", "--no-input", action="store_false", dest="interactive", help="do not ask for confirmation"
        )

    def handle(self, *args, username=None, org=None, external_id=None, interactive=True, **options):
        user = self._find(username, org, external_id)
        if interactive:
            try:
                answer = input(
                    f"Erase {user.get_username()} and everything held about them? This cannot be undone. "
                    "Type 'erase' to confirm: "
                )
            except EOFError:  # no terminal to answer from (a script, a pipe): say so, not a traceback
                raise CommandError("Not erased: nobody answered. Run it in a terminal, or pass --noinput.") from None
            if answer.strip().lower() != "erase":
                raise CommandError("Not erased.")
        try:
            receipt = erasure.erase_user(user, requested_via="command")
        except erasure.ErasureRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"Erased. Receipt {receipt.id}:"))
        self.stdout.write(json.dumps(erasure.receipt_json(receipt), indent=2))

    def _find(self, username, org, external_id):
        if username and (org or external_id):
            raise CommandError("Give a username, or --org with --external-id, not both.")
        if username:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                raise CommandError(f"No account with username {username!r}.")
            return user
        if not (org and external_id):
            raise CommandError("Give a username, or --org with --external-id.")
        organisation = Organization.objects.filter(slug=org).first()
        if organisation is None:
            raise CommandError(f"No organisation with slug {org!r}.")
        user = sessions.find_user(organisation, external_id)
        if user is None:
            raise CommandError(f"No person with external id {external_id!r} in {org}.")
        return user
