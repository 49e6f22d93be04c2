"""Run the MCP server over stdio, for desktop clients (Claude Desktop and the like).

The API key comes from the environment (MEMORYAPP_API_KEY) or a file (--key-file), never from the
command line, where any user of the machine can read it (`ps`, /proc/<pid>/cmdline).
"""

import argparse
import os
import stat

import anyio
from django.core.management.base import BaseCommand, CommandError

from memoryapp import sessions
from memoryapp.mcp_server import build_server

KEY_ENV = "MEMORYAPP_API_KEY"
KEY_FILE_MAX = 1024  # a key is ~50 characters; anything much longer is not a key file


class Command(BaseCommand):
    help = (
        f"Serve memoryapp's MCP tools over stdio as one API key (and, with --user, for one person). "
        f"The key is read from ${KEY_ENV} or from --key-file."
    )

    def add_arguments(self, parser):
        parser.add_argument("--key-file", help=f"a file holding the API key (mem_...); or set ${KEY_ENV}")
        parser.add_argument("--user", help="your agent's id for the one person this server is for")
        # Accepted only to refuse it with a clear message (argparse would just say "unrecognized").
        parser.add_argument("--key", help=argparse.SUPPRESS)

    def handle(self, *args, key_file, user, key=None, **options):
        if key is not None:
            raise CommandError(
                f"--key is refused: a key on the command line is visible to every user of this machine (ps). "
                f"Set {KEY_ENV} in the server's environment (the 'env' of your MCP client's configuration), "
                f"or pass --key-file with a file only you can read."
            )
        key = self._key_from_file(key_file) if key_file else os.environ.get(KEY_ENV, "").strip()
        if not key:
            raise CommandError(f"No API key: set {KEY_ENV} in the environment, or pass --key-file.")
        if sessions.authenticate_key(key) is None:
            raise CommandError("That API key is not valid or has been revoked.")
        # stdout carries the protocol: nothing else may be written to it.
        anyio.run(build_server(fixed_key=key, fixed_user=user).run_stdio_async)

    def _key_from_file(self, path):
        try:
            if os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                # stderr, never stdout (the protocol's); a warning, since the key works either way.
                self.stderr.write(f"Warning: {path} can be read by other users; chmod 600 it.")
            with open(path, encoding="utf-8") as f:
                return f.read(KEY_FILE_MAX).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"--key-file: cannot read {path} ({exc.__class__.__name__}).") from None
