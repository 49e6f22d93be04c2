"""Test settings: the production settings, with a random SECRET_KEY when the environment has none.

Set in os.environ so the workers and commands the tests start inherit the same key.
"""

import os
import secrets

os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))

from memoryapp.settings import *  # noqa: E402, F403
