"""Settings, read only from the environment. Defaults follow the seed article."""

import importlib.util
import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from whitenoise.compress import Compressor

from memoryapp import db

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name, default=None):
    return os.environ.get(name, default)


def env_bool(name, default=False):
    return env(name, str(default)).lower() in ("1", "true", "yes", "on")


def env_int(name, default):
    return int(env(name, default))


def env_float(name, default):
    return float(env(name, default))


DEBUG = env_bool("DEBUG", False)
# The environment, else this checkout's own random key that `make run` / `make test` generate.
SECRET_KEY = env("SECRET_KEY") or db.local_secret_key()
if not SECRET_KEY:
    if not DEBUG:
        # Why: a fallback key in the source would sign everyone's sessions and links, and would
        # make an erasure receipt's keyed reference reversible to a user id.
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it to a long random value (for example the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`); `make run` and `make test` "
            "generate one into .data/secret_key."
        )
    SECRET_KEY = secrets.token_urlsafe(50)  # DEBUG only: random per process, never a known value
ALLOWED_HOSTS = [h for h in env("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",
    "memoryapp",
]
# The lab: benchmarks (bench/) and evaluations (evals/), with their management commands. They need the
# dev requirements (httpx, the load generator's tools), so they are on where those are installed
# (`make test`, a developer's checkout) and off in a production install (requirements.txt only);
# LAB_APPS=1 or 0 says so explicitly. scripts/run serves with them off, as production does.
LAB_APPS = env_bool("LAB_APPS", importlib.util.find_spec("pytest") is not None)
if LAB_APPS:
    INSTALLED_APPS += ["bench", "evals"]

MIDDLEWARE = [
    "memoryapp.middleware.ServerTimingMiddleware",  # first: its time covers all the others
    # Outermost (after the timing), so it also sees the 400 Django answers for a bad Host header further in.
    "memoryapp.middleware.ApiJsonErrorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from STATIC_ROOT (after collectstatic) with far-future caching, so the
    # production server (gunicorn, DEBUG off) shows the real pages with no separate web server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "memoryapp.middleware.ContentSecurityPolicyMiddleware",
    "memoryapp.replica.ReplicaMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "memoryapp.middleware.PortalSessionMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "memoryapp.middleware.ActionPageMiddleware",
]
CSRF_FAILURE_VIEW = "memoryapp.pages.errors.csrf_failure"

ROOT_URLCONF = "memoryapp.urls"
WSGI_APPLICATION = "memoryapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "memoryapp.context_processors.navigation",
            ],
        },
    },
]

# --- database -------------------------------------------------------------
# memoryapp.dbbackend is Django's PostgreSQL backend; on a process's first connection it starts
# the embedded server (no DATABASE_URL) or checks pgvector (DATABASE_URL). Importing settings
# starts nothing.
DATABASE_URL = env("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, engine="memoryapp.dbbackend")}
else:
    DATABASES = {"default": {"ENGINE": "memoryapp.dbbackend", "NAME": db.DB_NAME, "EMBEDDED": True}}
# Each web process runs Django's views in WEB_THREADS reused threads (memoryapp/asgi.py); the MCP
# transport's tools run in threads of their own beside them.
WEB_THREADS = env_int("WEB_THREADS", 10)
# Why a pool: Django's ASGI handler ran each request's sync code in a thread of its own, and with
# persistent connections (CONN_MAX_AGE) every such thread kept a connection until PostgreSQL ran out
# (100 on the embedded server). Each process now holds at most DB_POOL_MAX_SIZE connections; a
# request that finds them all busy waits DB_POOL_TIMEOUT seconds and then answers 503 with
# Retry-After. Sized for `manage.py drill burst` (50 clients on two web processes: at 10 a process,
# 31 of 2,488 valid calls waited past 5 s on a loaded machine). Budget for the embedded server's
# max_connections = 100 (docs/scaling.md): two web processes at 25, the worker's processes (one task
# and its lease heartbeat each), beat and commands, with headroom for psql.
# DB_POOL=0 goes back to one connection per request (CONN_MAX_AGE then applies).
DB_POOL = env_bool("DB_POOL", True)
DB_POOL_OPTIONS = {
    "min_size": env_int("DB_POOL_MIN_SIZE", 2),
    "max_size": env_int("DB_POOL_MAX_SIZE", 25),
    "timeout": env_float("DB_POOL_TIMEOUT", 10.0),
    # Connections older than this are replaced (spreads server memory growth; psycopg's default is 1 h).
    "max_lifetime": env_float("DB_POOL_MAX_LIFETIME", 1800.0),
}
DATABASES["default"]["OPTIONS"] = {
    **DATABASES["default"].get("OPTIONS", {}),
    **db.connection_options(DB_POOL_OPTIONS if DB_POOL else None),
}
DATABASES["default"]["CONN_MAX_AGE"] = 0 if DB_POOL else env_int("CONN_MAX_AGE", 0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Each concurrent test run (CI, a developer, a helper) can take its own test database.
DATABASES["default"]["TEST"] = {"NAME": "test_memoryapp" + env("TEST_DB_SUFFIX", "")}
# A streaming replica for page reads (see memoryapp/replica.py and docs/scaling.md); off when unset.
DATABASE_REPLICA_URL = env("DATABASE_REPLICA_URL")
# A replica that gives no connection within REPLICA_CONNECT_SECONDS is skipped (pages read the primary)
# for REPLICA_RETRY_SECONDS in that process: a dead standby costs one short wait, not one per page.
REPLICA_CONNECT_SECONDS = env_int("REPLICA_CONNECT_SECONDS", 2)
REPLICA_RETRY_SECONDS = env_int("REPLICA_RETRY_SECONDS", 10)
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = dj_database_url.parse(DATABASE_REPLICA_URL, engine="memoryapp.dbbackend")
    DATABASES["replica"]["OPTIONS"] = {
        **DATABASES["replica"].get("OPTIONS", {}),
        **db.connection_options({**DB_POOL_OPTIONS, "timeout": REPLICA_CONNECT_SECONDS} if DB_POOL else None),
        "connect_timeout": REPLICA_CONNECT_SECONDS,
    }
    # A streaming replica is a copy of the primary, whose pgvector was checked; checking it again would
    # turn a replica that is down at a process's first page into a configuration error, not a fallback.
    DATABASES["replica"]["CHECK_PGVECTOR"] = False
    DATABASES["replica"]["CONN_MAX_AGE"] = DATABASES["default"]["CONN_MAX_AGE"]
    DATABASES["replica"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
DATABASE_ROUTERS = ["memoryapp.replica.ReplicaRouter"]
REPLICA_PIN_SECONDS = env_int("REPLICA_PIN_SECONDS", 5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- cache: rate limits count here when REDIS_URL is set, else in PostgreSQL (memoryapp/ratelimit.py)
REDIS_URL = env("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "memoryapp.cache.SharedRedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Sign-in sessions stay in the database (the default engine). cached_db on Redis was measured for
# issue 19 and saved nothing per page (docs/benchmarks.md, "Pages"); erasure also clears the cached
# copies should a deployment choose a cache-backed engine (docs/security.md, "Sign-in sessions").

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where collectstatic writes and WhiteNoise serves from (the test suite gives each worker its own).
STATIC_ROOT = Path(env("STATIC_ROOT") or BASE_DIR / "staticfiles")
# Hashed, compressed names (collectstatic writes the manifest) unless STATIC_MANIFEST=0: DEBUG
# runserver and the test suite (pytest sets PYTEST_VERSION before settings load) read the source
# files directly and never run collectstatic.
STATIC_MANIFEST = env_bool("STATIC_MANIFEST", not DEBUG and "PYTEST_VERSION" not in os.environ)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if STATIC_MANIFEST
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
# Without a manifest WhiteNoise looks files up through the finders (no collectstatic needed).
WHITENOISE_USE_FINDERS = not STATIC_MANIFEST
# Pages name files through {% static %}, so only the hashed copies are kept, and source maps (fetched by
# a browser's developer tools alone) are not precompressed: collectstatic compresses a sixth as much.
WHITENOISE_KEEP_ONLY_HASHED_FILES = True
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = [*Compressor.SKIP_COMPRESS_EXTENSIONS, "map"]

# --- security -------------------------------------------------------------
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG and env_bool("HTTPS", False))
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = env_bool("HTTPS", False)
SECURE_HSTS_SECONDS = 31536000 if env_bool("HTTPS", False) else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_PROXY", False) else None
# The one body limit: Django's own check, and memoryapp.request_limits refusing larger bodies (413)
# before they are read, for the API, the pages and /mcp/ alike.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 1_048_576)
# Seconds a request's headers (from their first byte, or from connecting) and its whole body may
# take to arrive before the connection is answered 408 and closed (memoryapp.request_limits).
REQUEST_HEADER_TIMEOUT = env_float("REQUEST_HEADER_TIMEOUT", 10.0)
REQUEST_BODY_TIMEOUT = env_float("REQUEST_BODY_TIMEOUT", 30.0)

# --- Celery ---------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
# --- models (read by the Celery settings below) ------------------------------
ANTHROPIC_TIMEOUT = env_float("ANTHROPIC_TIMEOUT", 30.0)
ANTHROPIC_MAX_RETRIES = env_int("ANTHROPIC_MAX_RETRIES", 3)
OPENAI_TIMEOUT = env_float("OPENAI_TIMEOUT", 60.0)
OPENAI_MAX_RETRIES = env_int("OPENAI_MAX_RETRIES", 3)
# A web request (an agent's "remember this", an admin adding an org fact) waits at most this long for
# the verdict model, one attempt; then the offline judge answers (labelled in provenance), or with
# MODEL_STRICT the request is refused with 503 model_unavailable and Retry-After.
MODEL_REQUEST_SECONDS = env_float("MODEL_REQUEST_SECONDS", 10.0)
MODEL_STRICT = env_bool("MODEL_STRICT", False)
# An extraction's claim on its session. A heartbeat in the working task renews it every third of the
# lease while the task runs (a model call included), so it runs out only when the worker is gone;
# then the sweeper (every SWEEP_SECONDS) takes the session over and marks the abandoned run: a dead
# worker's session is redone within lease + sweep interval (about a minute). Each model call in the
# worker is one attempt (its provider's timeout); a failure goes back to the queue with backoff.
EXTRACTION_LEASE = timedelta(seconds=env_int("EXTRACTION_LEASE_SECONDS", 45))
SWEEP_SECONDS = env_int("SWEEP_SECONDS", 20)
# A failed extraction is retried after this wait, doubled for each further attempt (at most 60 times it).
EXTRACTION_RETRY_SECONDS = env_int("EXTRACTION_RETRY_SECONDS", 60)
# Tests move the app clock (memoryapp.clock) by setting this through a fixture; always zero in production.
CLOCK_OFFSET = timedelta(0)

# Why the visibility timeout: with acks_late, Redis hands an unacknowledged task to another worker
# only after this many seconds. Its default (one hour) meant a task whose worker died was never
# redelivered in practice. Longer than the lease, so when redelivery happens the dead worker's claim
# has run out and the new delivery can take the session over (the sweeper usually has already). A
# task that outlives it while its worker is alive is redelivered too, but finds the claim still held
# (renewed by its heartbeat) and does nothing.
REDIS_VISIBILITY_TIMEOUT = int(EXTRACTION_LEASE.total_seconds()) + 60
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {"visibility_timeout": REDIS_VISIBILITY_TIMEOUT}
    if CELERY_BROKER_URL != "filesystem://"
    else {
        "data_folder_in": str(db.DATA_DIR / "broker"),
        "data_folder_out": str(db.DATA_DIR / "broker"),
        "processed_folder": str(db.DATA_DIR / "broker-processed"),
        # kombu's default control folder is ./control, inside the repository.
        "control_folder": str(db.DATA_DIR / "broker-control"),
        "store_processed": False,
        # The worker looks for new files this often (default 1 s); shorter also lets a stopping
        # worker leave its polling loop sooner (SIGTERM to exit under 10 s).
        "polling_interval": 0.25,
    }
)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the message for another
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_QUEUE", "memoryapp")
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publishing must fail fast when the broker is down: the end is already in the database and
# the sweeper enqueues it once the broker is back.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
CELERY_BEAT_SCHEDULE = {
    "sweep-sessions": {"task": "memoryapp.sweep_sessions", "schedule": float(SWEEP_SECONDS)},
    "forget-nightly": {
        "task": "memoryapp.forget",
        "schedule": __import__("celery.schedules", fromlist=["crontab"]).crontab(hour=3, minute=17),
    },
    "retention-nightly": {
        "task": "memoryapp.apply_retention",
        "schedule": __import__("celery.schedules", fromlist=["crontab"]).crontab(hour=3, minute=47),
    },
    "lapse-pending-nightly": {
        "task": "memoryapp.lapse_pending",
        "schedule": __import__("celery.schedules", fromlist=["crontab"]).crontab(hour=4, minute=7),
    },
}

# --- models ---------------------------------------------------------------
ANTHROPIC_API_KEY = env("ANTHROPIC_API_KEY")
# anthropic | openai | offline; empty means anthropic when a key is set, else offline. Tests and the
# scenario harness put a backend instance here through override_settings.
EXTRACTION_BACKEND = env("EXTRACTION_BACKEND", "")
ANTHROPIC_HTTP_CLIENT = None  # tests: an httpx2.Client on a MockTransport
ANTHROPIC_MODEL = env("ANTHROPIC_MODEL", "claude-haiku-4-5-20251001")
# Any server speaking OpenAI's chat-completions API: OpenAI itself, or Ollama, vLLM, llama.cpp's
# server, LM Studio on-prem (OPENAI_BASE_URL=http://localhost:11434/v1 for Ollama).
OPENAI_BASE_URL = env("OPENAI_BASE_URL") or None  # None: api.openai.com
OPENAI_API_KEY = env("OPENAI_API_KEY")
OPENAI_MODEL = env("OPENAI_MODEL", "gpt-4o-mini")
OPENAI_HTTP_CLIENT = None  # tests: an httpx2.Client on a MockTransport
# USD per million tokens; 0 for a local model. Cached input is the share of the prompt the server
# reports as served from its prompt cache.
OPENAI_PRICE_PER_MTOK = {
    "input": env("OPENAI_PRICE_INPUT_PER_MTOK", "0"),
    "output": env("OPENAI_PRICE_OUTPUT_PER_MTOK", "0"),
    "cache_read": env("OPENAI_PRICE_CACHED_INPUT_PER_MTOK", "0"),
    "cache_write": "0",
}
# minilm-qint8: MiniLM with int8 MatMuls, twice as fast for the same retrieval (docs/benchmarks.md);
# minilm: the unquantized model; voyage: Voyage AI. After a change, `manage.py reembed_facts`.
EMBEDDING_BACKEND = env("EMBEDDING_BACKEND", "minilm-qint8")
if EMBEDDING_BACKEND not in ("minilm-qint8", "minilm", "voyage"):
    raise ImproperlyConfigured(f"EMBEDDING_BACKEND must be minilm-qint8, minilm or voyage, not {EMBEDDING_BACKEND!r}")
# Cores MiniLM may use for one text. 1 suits a busy server (every core already serves a request);
# 2 cuts a lone recall's embedding by about a third when a core is idle (docs/benchmarks.md).
EMBEDDING_THREADS = max(1, env_int("EMBEDDING_THREADS", 1))
VOYAGE_API_KEY = env("VOYAGE_API_KEY")
VOYAGE_MODEL = env("VOYAGE_MODEL", "voyage-3.5-lite")
# Voyage vectors are asked for at 256 dimensions. Recall's covering index (fact_user_recall_idx) keeps
# each vector at half precision in an index row, beside the fact's text and words, which PostgreSQL caps
# at 2,704 bytes: 256 dimensions keep that row no bigger than MiniLM's 384. Only Voyage's models with a
# choice of size are accepted.
VOYAGE_DIMENSIONS = 256
VOYAGE_MODELS = ("voyage-3.5-lite", "voyage-3.5", "voyage-3-large", "voyage-code-3")
if EMBEDDING_BACKEND == "voyage" and VOYAGE_MODEL not in VOYAGE_MODELS:
    raise ImproperlyConfigured(f"VOYAGE_MODEL must be one of {', '.join(VOYAGE_MODELS)} (256-dimension vectors)")

# --- memory knobs (seed defaults; floors calibrated per embedding model) ---
MEMORY = {
    "RECALL_CAP": env_int("MEMORY_RECALL_CAP", 20),
    # Tier 1 (always on) is a quota per kind, in this order: every constraint first (up to 12, they
    # must always reach the model), then the few most-confirmed profile facts. Other profile facts
    # compete in tier 2 by similarity, which fills the rest of the cap. Chosen on LoCoMo's dev split
    # over "12 most recent constraint/profile facts + 8 similar" (docs/benchmarks.md).
    "TIER1_LIMIT": env_int("MEMORY_TIER1_LIMIT", 12),
    "TIER1_KINDS": {
        "constraint": env_int("MEMORY_TIER1_CONSTRAINTS", 12),
        "profile": env_int("MEMORY_TIER1_PROFILES", 2),
    },
    "TIER1_ORDER": env("MEMORY_TIER1_ORDER", "confirmations"),  # confirmations | recent, inside each kind
    "TIER2_LIMIT": env_int("MEMORY_TIER2_LIMIT", 20),
    "RECALL_LEXICAL": env_bool("MEMORY_RECALL_LEXICAL", True),  # tier 2 fuses full-text rank with cosine
    "ORG_LIMIT": env_int("MEMORY_ORG_LIMIT", 8),
    "NEIGHBOUR_LIMIT": env_int("MEMORY_NEIGHBOUR_LIMIT", 5),
    # Floors per embedding backend; None means "use the calibrated default".
    "NEIGHBOUR_FLOOR": env("MEMORY_NEIGHBOUR_FLOOR"),
    "CHANGE_FLOOR": env("MEMORY_CHANGE_FLOOR"),  # the neighbour floor for a fact that announces a change
    "RECALL_FLOOR": env("MEMORY_RECALL_FLOOR"),
    "INACTIVITY_MINUTES": env_int("MEMORY_INACTIVITY_MINUTES", 30),
    "HARD_CAP_HOURS": env_float("MEMORY_HARD_CAP_HOURS", 8),
    "MAX_TURN_BYTES": env_int("MEMORY_MAX_TURN_BYTES", 32 * 1024),
    "MAX_TURNS_PER_CALL": env_int("MEMORY_MAX_TURNS_PER_CALL", 100),
    "MAX_TURNS_PER_SESSION": env_int("MEMORY_MAX_TURNS_PER_SESSION", 2000),
    "MAX_FACTS_PER_USER": env_int("MEMORY_MAX_FACTS_PER_USER", 1000),
    "TURN_RETENTION_DAYS": env_int("MEMORY_TURN_RETENTION_DAYS", 30),
    "FORGETTING_MODE": env("MEMORY_FORGETTING_MODE", "log"),  # log | enforce
    "FORGETTING_GRACE_DAYS": env_int("MEMORY_FORGETTING_GRACE_DAYS", 30),
    # Days a pending candidate waits for the person (and a refused one stays in the audit).
    "PENDING_DAYS": env_int("MEMORY_PENDING_DAYS", 30),
    "FORGETTING_BATCH": env_int("MEMORY_FORGETTING_BATCH", 2000),
    # Per scope, per kind: days without confirmation before a fact is stale (None: never).
    "STALE_DAYS": {
        "personal": {"goal": env_int("MEMORY_GOAL_STALE_DAYS", 90)},
        "org": {"goal": env_int("MEMORY_ORG_GOAL_STALE_DAYS", 180)},
    },
    # Per scope: days after creation before a never-recalled fact expires (None: never).
    "NEVER_RECALLED_DAYS": {
        "personal": env_int("MEMORY_NEVER_RECALLED_DAYS", 60),
        "org": None,  # org facts are curated by admins
    },
    "PORTAL_LINK_MINUTES": env_int("MEMORY_PORTAL_LINK_MINUTES", 10),
    # A memory-only session (opened by a portal link) ends after this long without a request.
    "PORTAL_IDLE_MINUTES": env_int("MEMORY_PORTAL_IDLE_MINUTES", 30),
    "INVITATION_DAYS": env_int("MEMORY_INVITATION_DAYS", 7),
    # Backoff doubles from 1 minute up to 60: 10 attempts ride out a model outage of about 4 hours.
    "EXTRACTION_MAX_ATTEMPTS": env_int("MEMORY_EXTRACTION_MAX_ATTEMPTS", 10),
    "API_RATE_PER_MINUTE": env_int("MEMORY_API_RATE_PER_MINUTE", 600),
    # Sign-in attempts per account name from one address, and from one address in all.
    "LOGIN_RATE_PER_MINUTE": env_int("MEMORY_LOGIN_RATE_PER_MINUTE", 10),
    "LOGIN_ADDRESS_RATE_PER_MINUTE": env_int("MEMORY_LOGIN_ADDRESS_RATE_PER_MINUTE", 30),
    "POISON_PROBES": [p for p in env("MEMORY_POISON_PROBES", "").split("|") if p],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "WARNING")},
}
