"""Test settings: the production settings, with a random SECRET_KEY when the environment has none.

Set in os.environ so the workers and commands the tests start inherit the same key.
"""

import atexit
import os
import secrets
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))


def _test_data_dir():
    """A temporary MEMORYAPP_DATA_DIR, so no test writes into the checkout's .data/ (the demo key, the
    database, static files, model and broker folders). The tests' embedded PostgreSQL starts in its pg/ on
    first use (about a second) and is stopped when the run ends. Set in os.environ before the settings are
    read, so pytest-xdist workers and the servers and commands the tests start use the same one."""
    checkout_data = Path(__file__).resolve().parent.parent / ".data"
    data = Path(tempfile.mkdtemp(prefix="memoryapp-test-data-"))
    # atexit runs last-registered first: stop the server, then remove its folder. Only the process that
    # made the folder (xdist's controller) registers either.
    atexit.register(shutil.rmtree, data, ignore_errors=True)
    atexit.register(_stop_embedded_server)
    # The quantized embedding model is a cache built from a pinned file (seconds): reuse the checkout's by copy.
    if (checkout_data / "models").is_dir():
        shutil.copytree(checkout_data / "models", data / "models", ignore=shutil.ignore_patterns("*.lock", "*.partial"))
    return str(data)


def _stop_embedded_server():
    from memoryapp import db

    db.embedded_stop()


if "MEMORYAPP_DATA_DIR" not in os.environ:
    os.environ["MEMORYAPP_DATA_DIR"] = _test_data_dir()
# Each pytest-xdist worker collects static files into a folder of its own (inherited by the servers
# tests start): one worker's collectstatic replaces files while another's WhiteNoise lists them.
# Always set, not defaulted: the workers inherit the controller's environment.
os.environ["STATIC_ROOT"] = os.path.join(
    os.environ["MEMORYAPP_DATA_DIR"], "static-" + os.environ.get("PYTEST_XDIST_WORKER", "main")
)
# Each worker's benchmark smoke runs get databases of their own (bench/recall.py adds TEST_DB_SUFFIX to
# their names): two workers' bench_peers smoke runs dropped each other's database mid-run. Appended once:
# the commands and servers a test starts inherit both variables.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
_suffix = os.environ.get("TEST_DB_SUFFIX", "").removesuffix("_" + _worker if _worker else "")
if _worker:
    os.environ["TEST_DB_SUFFIX"] = _suffix + "_" + _worker
# WhiteNoise warns about a missing static folder on every handler it builds; an empty one is enough.
os.makedirs(os.environ["STATIC_ROOT"], exist_ok=True)

from memoryapp.settings import *  # noqa: E402, F403

# pytest-django adds the worker's name to the test database's name itself (test_memoryapp_gw0).
DATABASES["default"]["TEST"]["NAME"] = "test_memoryapp" + _suffix  # noqa: F405

# Tests create hundreds of users: the production hasher's deliberate slowness buys nothing here.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# WhiteNoise (through the finders, with no collectstatic) lists and stats every static file, ~180 with
# the admin's and ninja's, each time a middleware chain is built: each new test Client built one, 10 ms
# of CPU apiece, and the authorization matrix makes a fresh Client for each of its ~2,000 requests.
# Autorefresh finds a file when it is asked for instead; what is served, and its headers, are the same.
WHITENOISE_AUTOREFRESH = True
