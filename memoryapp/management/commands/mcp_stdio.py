"""Run the MCP server over stdio, for desktop clients (Claude Desktop and the like)."""

import anyio
from django.core.management.base import BaseCommand, CommandError

from memoryapp import sessions
from memoryapp.mcp_server import build_server


class Command(BaseCommand):
    help = "Serve memoryapp's MCP tools over stdio as one API key (and, with --user, for one person)."

    def add_arguments(self, parser):
        parser.add_argument("--key", required=True, help="an API key of the organisation (mem_...)")
        parser.add_argument("--user", help="your agent's id for the one person this server is for")

    def handle(self, *args, key, user, **options):
        api_key = sessions.authenticate_key(key)
        if api_key is None:
            raise CommandError("That API key is not valid or has been revoked.")
        # stdout carries the protocol: nothing else may be written to it.
        anyio.run(build_server(fixed_key=key, fixed_user=user).run_stdio_async)
