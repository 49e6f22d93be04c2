"""One-time link tokens (invitations, portal links, password resets): a random token, stored only as its hash."""

import hashlib
import secrets


def token_hash(token):
    """The sha256 hex digest stored in place of a link's token."""
    return hashlib.sha256((token or "").encode()).hexdigest()


def new_token():
    """A fresh URL-safe token and the hash to store: (token, hash)."""
    token = secrets.token_urlsafe(32)
    return token, token_hash(token)
