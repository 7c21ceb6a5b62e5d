"""Corral settings, read from the environment once, here.

Development defaults need nothing installed: SQLite under ``var/`` and Kombu's filesystem broker. Setting
``DATABASE_URL`` / ``REDIS_URL`` switches to PostgreSQL / Redis. ``CORRAL_PRODUCTION=1`` makes the secret key,
PostgreSQL and Redis mandatory and refuses debug, so a forgotten variable fails at start-up, not at 3 a.m.
Debug is off unless ``DEBUG=1`` asks for it, the demo included: its pages list every URL and setting to anyone.

Long on purpose: every knob an operator can turn is read here, once, with the comment that says what it does, so
docs/operations.md and this file can be checked against each other.
"""

from __future__ import annotations

import importlib.util
import ipaddress
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from scheduling.core.durations import parse_duration
from telemetry.retry import DEFAULT_MAX_HARDWARE_RETRIES

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

PRODUCTION: bool = env.bool("CORRAL_PRODUCTION", default=False)
DATA_DIR = Path(env.str("CORRAL_DATA_DIR", default=str(BASE_DIR / "var"))).resolve()

if PRODUCTION:
    for required in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL"):
        if not env.str(required, default=""):
            raise ImproperlyConfigured(f"CORRAL_PRODUCTION=1 requires {required} to be set")
    if not env.str("DATABASE_URL").startswith(("postgres://", "postgresql://", "pgsql://")):
        raise ImproperlyConfigured("CORRAL_PRODUCTION=1 requires a PostgreSQL DATABASE_URL")

SECRET_KEY = env.str("SECRET_KEY", default="corral-development-only-not-secret")
DEBUG = env.bool("DEBUG", default=False)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured(
        "DEBUG=1 cannot be combined with CORRAL_PRODUCTION=1: debug pages show code and settings"
    )
# "testserver" is Django's test client; pytest-django allows it by itself, so production need not.
ALLOWED_HOSTS: list[str] = env.list(
    "ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", *([] if PRODUCTION else ["testserver"])]
)
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "portal.tenants",
    "portal.nodes",
    "portal.jobs",
    "portal.telemetry",
    "portal.scheduler",
    "portal.whatif",
    "portal.pools",
    "portal.dashboards",
    "portal.notifications",
    "portal.energy",
    "portal.accounts",
    "portal.web",
    "portal.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before anything reads the URL or the body (CSRF reads form bodies): see portal/web/middleware.py.
    "portal.web.middleware.RejectNulMiddleware",
    "portal.web.middleware.BodyLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

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

# --- Database -------------------------------------------------------------------------------------------------
_sqlite_default = f"sqlite:///{DATA_DIR / 'corral.sqlite3'}"
DATABASES = {"default": env.db_url("DATABASE_URL", default=_sqlite_default)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The embedded default serves web, worker, beat and agents at once: WAL lets readers and one writer overlap,
    # and IMMEDIATE transactions take the write lock up front instead of failing half-way with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = (
    [
        {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
        {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    ]
    if PRODUCTION
    else []
)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"


def _package_data(package: str) -> Path:
    """The installed ``package``'s directory of bundled files, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImproperlyConfigured(f"the {package} package is not installed")
    return Path(spec.submodule_search_locations[0]) / "package_data"


# plotly.js for the what-if charts is the copy the installed plotly package ships, served as
# /static/vendor/plotly/plotly.min.js: no CDN (clusters are often air-gapped) and no 4 MB file in git. The prefix
# publishes the rest of that directory too (plotly's widget bundle, templates, sample data): public files only.
STATICFILES_DIRS = [BASE_DIR / "static", ("vendor/plotly", _package_data("plotly"))]
STATIC_ROOT = DATA_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve from static/ directly too, so `make run` works before collectstatic

# Passwords (local accounts: the demo, break-glass admins), then the identity provider's code flow, which answers
# nothing unless single sign-on is configured (below). The API's tokens are DRF's and do not go through these.
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend", "portal.accounts.backends.OidcBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "job-list"
LOGOUT_REDIRECT_URL = "login"

# --- HTTPS (docs/operations.md, "Production: docker compose") -------------------------------------------------
# Cookies are Secure in production. The redirect and HSTS are off unless asked for: agents and Prometheus often reach
# the portal over plain http inside the cluster, and a redirect would break them. `manage.py check --deploy` is quiet
# once a TLS site sets them.
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=PRODUCTION)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=PRODUCTION)
SECURE_SSL_REDIRECT = env.bool("CORRAL_SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("CORRAL_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("CORRAL_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("CORRAL_HSTS_PRELOAD", default=False)


def _proxy_ssl_header(spec: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` (value ``https``) or ``X-Forwarded-Ssl=on`` as Django's ``("HTTP_X_…", value)``."""
    if not spec.strip():
        return None
    name, _, value = spec.partition("=")
    return "HTTP_" + name.strip().upper().replace("-", "_"), value.strip() or "https"


# The header a TLS-terminating proxy sets (and strips from clients) to say the request came over https.
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(env.str("CORRAL_SECURE_PROXY_SSL_HEADER", default=""))

# --- REST API ------------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    # DRF's three, with a JSON parser that refuses absurd nesting (a 400, not a RecursionError's 500).
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    # drf-spectacular's, plus the error answers every operation shares (400, 401, 403, 404, 415), in one place.
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.CorralAutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exceptions.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Corral API",
    "DESCRIPTION": (
        "Submit and follow GPU jobs on a shared cluster. Authenticate with `Authorization: Token <t>`; node agents "
        "(`/api/v1/agent/`) with `Authorization: Node <token>`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI's assets come from the installed sidecar package, not a CDN: clusters are often air-gapped.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # A job's state is one enum, named, whichever serializer shows it (the list's Job, the detail's JobDetail).
    "ENUM_NAME_OVERRIDES": {"JobStateEnum": "portal.jobs.models.JOB_STATE_CHOICES"},
}

# --- Celery --------------------------------------------------------------------------------------------------
REDIS_URL: str = env.str("REDIS_URL", default="")
BROKER_DIR = DATA_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
else:
    # Kombu's filesystem transport: a real broker with no server, for `make run` on a bare machine.
    CELERY_BROKER_URL = "filesystem://"
    for _folder in ("queue", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Email (notifications: docs/notifications.md) -------------------------------------------------------------
# EMAIL_URL names the backend and server: smtp://host:25, smtp+tls://user:password@host:587, smtp+ssl://…:465. The
# default, consolemail://, prints each mail in the worker's log, so `make run` needs no mail server.
_email = env.email_url("EMAIL_URL", default="consolemail://")
EMAIL_BACKEND: str = _email["EMAIL_BACKEND"]
EMAIL_HOST: str = _email["EMAIL_HOST"] or "localhost"
EMAIL_PORT: int = _email["EMAIL_PORT"] or 25
EMAIL_HOST_USER: str = _email["EMAIL_HOST_USER"] or ""
EMAIL_HOST_PASSWORD: str = _email["EMAIL_HOST_PASSWORD"] or ""
EMAIL_USE_TLS: bool = bool(_email.get("EMAIL_USE_TLS", False))
EMAIL_USE_SSL: bool = bool(_email.get("EMAIL_USE_SSL", False))
EMAIL_TIMEOUT: int = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL: str = env.str("DEFAULT_FROM_EMAIL", default="Corral <corral@localhost>")

# --- Cache ---------------------------------------------------------------------------------------------------
# Shared by web servers and workers: the coalesced round requests (portal.rounds) live here. Redis when REDIS_URL
# is set, else files under the data directory (the embedded default's processes share no memory). Keys carry the
# database's name (portal.db.cache_key), so two sites (or two test runs) on one Redis never see each other's flags.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_FUNCTION": "portal.db.cache_key",
            "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "cache"),
            "KEY_FUNCTION": "portal.db.cache_key",
        }
    }

# --- Corral --------------------------------------------------------------------------------------------------
#: Scheduling policy and placement model used by the live loop (names from scheduling.core).
CORRAL_POLICY: str = env.str("CORRAL_POLICY", default="fifo")
CORRAL_PLACEMENT: str = env.str("CORRAL_PLACEMENT", default="topology")
#: GPU shares (issue #17, docs/sharing.md): the placer for shares of shared GPUs (matching, best-fit, first-fit),
#: and how many MPS faults naming a job make it the culprit, kept off shared GPUs.
CORRAL_SHARE_PLACER: str = env.str("CORRAL_SHARE_PLACER", default="matching")
CORRAL_MPS_CULPRIT_FAULTS: int = env.int("CORRAL_MPS_CULPRIT_FAULTS", default=2)
#: How far back (a duration: 5m, 90s, or seconds) the share round averages a shared GPU's measured utilization to
#: take as its online client's load (never from before that client started; no reading: its whole share counts).
CORRAL_SHARE_LOAD_WINDOW: int = parse_duration(env.str("CORRAL_SHARE_LOAD_WINDOW", default="5m"))
#: Elastic jobs and stops with notice (issue #19, docs/elastic.md): how long a job has between the checkpoint signal
#: and its stop (a resize, a reclaimed node), what a restart costs it (the knapsack charges it to every resize and a
#: reclaim counts both in a node's server preemption cost; a reclaimed node's jobs get min(checkpoint, deadline) of
#: notice), the hysteresis (a job keeps its size this long after a start, and
#: a resize must gain this many seconds beyond its cost), and the work assumed left for a job with no estimate.
CORRAL_CHECKPOINT_SECONDS: float = env.float("CORRAL_CHECKPOINT_SECONDS", default=30.0)
CORRAL_RESTART_SECONDS: float = env.float("CORRAL_RESTART_SECONDS", default=60.0)
CORRAL_ELASTIC_MIN_INTERVAL: float = env.float("CORRAL_ELASTIC_MIN_INTERVAL", default=600.0)
CORRAL_ELASTIC_MIN_GAIN: float = env.float("CORRAL_ELASTIC_MIN_GAIN", default=60.0)
CORRAL_ELASTIC_DEFAULT_REMAINING: float = env.float("CORRAL_ELASTIC_DEFAULT_REMAINING", default=3600.0)
#: Fair share: the half-life (hours) of the usage history that orders who borrows idle quota first under a
#: ``+quota`` policy (docs/scheduling.md). A week, as Slurm's default; 0 turns fair share off.
CORRAL_FAIR_SHARE_HALF_LIFE_HOURS: float = env.float("CORRAL_FAIR_SHARE_HALF_LIFE_HOURS", default=168.0)
#: Seconds between agent heartbeats, and after which a silent node is marked down and its jobs requeued.
CORRAL_HEARTBEAT_INTERVAL: float = env.float("CORRAL_HEARTBEAT_INTERVAL", default=2.0)
CORRAL_NODE_TIMEOUT: float = env.float("CORRAL_NODE_TIMEOUT", default=30.0)
#: Seconds between SIGTERM and SIGKILL when a job is cancelled or preempted.
CORRAL_KILL_GRACE: float = env.float("CORRAL_KILL_GRACE", default=10.0)
#: Seconds a scheduler lease is valid; a round that outlives it loses the lease to the next one.
CORRAL_LEASE_SECONDS: float = env.float("CORRAL_LEASE_SECONDS", default=30.0)
#: Beat cadence of the scheduling round and the node-liveness sweep (seconds).
CORRAL_SCHEDULE_EVERY: float = env.float("CORRAL_SCHEDULE_EVERY", default=5.0)
#: Changes ask for a round through one shared flag (portal.rounds): the round waits this long after the first
#: request, so a burst of submissions is placed by one round. The beat round runs a full round only when one was
#: asked for, when the policy preempts (its priorities move with time), or at least every CORRAL_IDLE_ROUND_EVERY.
CORRAL_ROUND_COALESCE_SECONDS: float = env.float("CORRAL_ROUND_COALESCE_SECONDS", default=0.25)
CORRAL_IDLE_ROUND_EVERY: float = env.float("CORRAL_IDLE_ROUND_EVERY", default=60.0)
#: Seconds between start forecasts for pending jobs ("when should it start"), and how far ahead they look.
CORRAL_FORECAST_EVERY: float = env.float("CORRAL_FORECAST_EVERY", default=30.0)
CORRAL_FORECAST_HORIZON: float = env.float("CORRAL_FORECAST_HORIZON", default=7 * 86_400.0)
#: Cost bound of one forecast in job-rounds (jobs in the system x rounds played); jobs further back than that many
#: rounds are told they are too far back to forecast. 10 million keeps a forecast within seconds (docs/benchmarks.md).
CORRAL_FORECAST_WORK: int = env.int("CORRAL_FORECAST_WORK", default=10_000_000)
#: Telemetry sampling period asked of agents (seconds).
CORRAL_SAMPLE_INTERVAL: float = env.float("CORRAL_SAMPLE_INTERVAL", default=10.0)
#: How many times a job killed by hardware (lost node, fatal XID) is retried before it fails.
CORRAL_MAX_HARDWARE_RETRIES: int = env.int("CORRAL_MAX_HARDWARE_RETRIES", default=DEFAULT_MAX_HARDWARE_RETRIES)
#: Seconds between a fatal XID on a job's GPU and the job's non-zero exit (either first) within which the exit is
#: blamed on the hardware and retried; also how long a failed job may be reopened by a late XID (architecture.md).
CORRAL_XID_EXIT_WINDOW: float = env.float("CORRAL_XID_EXIT_WINDOW", default=30.0)
#: Days raw telemetry samples are kept (1-minute rollups 30 days, 1-hour rollups 400; docs/telemetry.md).
CORRAL_SAMPLE_RETENTION_DAYS: float = env.float("CORRAL_SAMPLE_RETENTION_DAYS", default=7)
#: Who may scrape GET /metrics (portal/metrics/views.py): a caller with "Authorization: Bearer <token>"
#: (Prometheus: authorization.credentials), or one from an allowed network (CIDRs, by the connection's address).
#: Neither set: open outside production, refused in production (it names every tenant and job).
CORRAL_METRICS_TOKEN: str = env.str("CORRAL_METRICS_TOKEN", default="")
CORRAL_METRICS_ALLOW_FROM: list[str] = env.list("CORRAL_METRICS_ALLOW_FROM", default=[])
for _network in CORRAL_METRICS_ALLOW_FROM:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as exc:
        raise ImproperlyConfigured(f"CORRAL_METRICS_ALLOW_FROM: {exc}") from None
#: The longest job time limit (seconds) a soft-cordoned GPU still takes: a GPU predicted to fail runs only jobs that
#: will be over soon. Jobs without a time limit count as long. 0: cordoned GPUs take no new jobs at all.
CORRAL_CORDON_MAX_TIME_LIMIT: int = env.int("CORRAL_CORDON_MAX_TIME_LIMIT", default=7200)
#: Failure-risk score at which a GPU is soft-cordoned; unset = the active model's own validated alarm threshold.
CORRAL_RISK_THRESHOLD: float | None = env.float("CORRAL_RISK_THRESHOLD", default=None)
#: First port handed to multi-node gangs as MASTER_PORT (the job id is added to spread them).
CORRAL_MASTER_PORT_BASE: int = env.int("CORRAL_MASTER_PORT_BASE", default=29500)
#: Characters of output stored per job: its first half (how the job began) and its most recent half (how it
#: ended) are kept, whatever lies between is dropped as the job prints on. 0: no limit.
CORRAL_JOB_LOG_MAX_CHARS: int = env.int("CORRAL_JOB_LOG_MAX_CHARS", default=16 * 1024 * 1024)
#: The most tasks one job array may have (docs/arrays.md); its indices go up to 4,000,000 whatever this says.
CORRAL_MAX_ARRAY_TASKS: int = env.int("CORRAL_MAX_ARRAY_TASKS", default=100_000)
#: A running job is *idle* (the job page's warning, the dashboard's list; telemetry.idle) when its GPUs' measured
#: utilization over the last CORRAL_IDLE_GPU_WINDOW (a duration: 30m, 1h, or seconds) averages below
#: CORRAL_IDLE_GPU_UTIL percent, and readings cover at least CORRAL_IDLE_GPU_MIN_COVERAGE (0-1) of that window.
CORRAL_IDLE_GPU_UTIL: float = env.float("CORRAL_IDLE_GPU_UTIL", default=10.0)
CORRAL_IDLE_GPU_WINDOW: int = parse_duration(env.str("CORRAL_IDLE_GPU_WINDOW", default="30m"))
CORRAL_IDLE_GPU_MIN_COVERAGE: float = env.float("CORRAL_IDLE_GPU_MIN_COVERAGE", default=0.75)
#: The portal's address as its users reach it: links in notifications start with it.
CORRAL_PUBLIC_URL: str = env.str("CORRAL_PUBLIC_URL", default="http://127.0.0.1:8000")
#: Seconds between notification sweeps (job news into the outbox), and how long a webhook may take to answer.
CORRAL_NOTIFY_EVERY: float = env.float("CORRAL_NOTIFY_EVERY", default=5.0)
CORRAL_NOTIFY_WEBHOOK_TIMEOUT: float = env.float("CORRAL_NOTIFY_WEBHOOK_TIMEOUT", default=5.0)
#: Networks no notification webhook is sent to, comma-separated (a user chooses the address, so it must not reach
#: what only the portal's host can): by default link-local addresses, where clouds serve instance metadata and
#: credentials. Add loopback (127.0.0.0/8,::1/128) or private ranges where webhooks never live there.
CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS: list[str] = env.list(
    "CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS", default=["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"]
)
#: Energy saving (issue #19, docs/energy.md#live-energy-saving): the site's commands that power a node down and
#: up, each run with the node's name as its last argument (as Slurm's SuspendProgram / ResumeProgram), without a
#: shell, for at most CORRAL_POWER_COMMAND_TIMEOUT seconds. Both empty (the default): energy saving is off.
CORRAL_POWER_OFF_COMMAND: str = env.str("CORRAL_POWER_OFF_COMMAND", default="")
CORRAL_POWER_ON_COMMAND: str = env.str("CORRAL_POWER_ON_COMMAND", default="")
CORRAL_POWER_COMMAND_TIMEOUT: float = env.float("CORRAL_POWER_COMMAND_TIMEOUT", default=120.0)
#: Never fewer nodes on than this; nodes kept on above the forecast; minutes a node must have been idle (and on)
#: before it may be powered down; minutes a wake-up takes; minutes after which a node that does not come back is
#: given up (shown down, as a node that stopped sending heartbeats).
CORRAL_POWER_MIN_NODES_ON: int = env.int("CORRAL_POWER_MIN_NODES_ON", default=1)
CORRAL_POWER_BUFFER: int = env.int("CORRAL_POWER_BUFFER", default=2)
CORRAL_POWER_IDLE_MINUTES: float = env.float("CORRAL_POWER_IDLE_MINUTES", default=10.0)
CORRAL_POWER_WAKE_MINUTES: float = env.float("CORRAL_POWER_WAKE_MINUTES", default=10.0)
CORRAL_POWER_WAKE_TIMEOUT_MINUTES: float = env.float("CORRAL_POWER_WAKE_TIMEOUT_MINUTES", default=30.0)
#: Days of per-minute demand samples kept (the forecaster learns from them), and hours between its trainings.
CORRAL_ENERGY_SAMPLE_DAYS: float = env.float("CORRAL_ENERGY_SAMPLE_DAYS", default=35.0)
CORRAL_ENERGY_TRAIN_HOURS: float = env.float("CORRAL_ENERGY_TRAIN_HOURS", default=6.0)

# --- Single sign-on (OpenID Connect; docs/oidc.md) -------------------------------------------------------------
# Off unless a client id and an issuer (endpoints by discovery, fetched at the first sign-in) or the authorization,
# token and JWKS endpoints are set. Local accounts keep working either way. A variable set but empty (as the compose
# file passes them) means its default.
CORRAL_OIDC_ISSUER: str = env.str("CORRAL_OIDC_ISSUER", default="")
CORRAL_OIDC_CLIENT_ID: str = env.str("CORRAL_OIDC_CLIENT_ID", default="")
CORRAL_OIDC_CLIENT_SECRET: str = env.str("CORRAL_OIDC_CLIENT_SECRET", default="")
CORRAL_OIDC_AUTHORIZATION_ENDPOINT: str = env.str("CORRAL_OIDC_AUTHORIZATION_ENDPOINT", default="")
CORRAL_OIDC_TOKEN_ENDPOINT: str = env.str("CORRAL_OIDC_TOKEN_ENDPOINT", default="")
CORRAL_OIDC_USERINFO_ENDPOINT: str = env.str("CORRAL_OIDC_USERINFO_ENDPOINT", default="")
CORRAL_OIDC_JWKS_ENDPOINT: str = env.str("CORRAL_OIDC_JWKS_ENDPOINT", default="")
#: The button says "Sign in with <this>".
CORRAL_OIDC_PROVIDER_NAME: str = env.str("CORRAL_OIDC_PROVIDER_NAME", default="") or "single sign-on"
CORRAL_OIDC_SCOPES: str = env.str("CORRAL_OIDC_SCOPES", default="") or "openid email profile"
CORRAL_OIDC_SIGN_ALGO: str = env.str("CORRAL_OIDC_SIGN_ALGO", default="") or "RS256"
#: Seconds to wait for the provider on each request of a sign-in.
CORRAL_OIDC_TIMEOUT: float = float(env.str("CORRAL_OIDC_TIMEOUT", default="") or 10.0)
#: The claim that becomes the Corral username, the claim that lists groups, and the group that makes staff (empty:
#: the provider never changes who is staff).
CORRAL_OIDC_USERNAME_CLAIM: str = env.str("CORRAL_OIDC_USERNAME_CLAIM", default="") or "preferred_username"
CORRAL_OIDC_GROUPS_CLAIM: str = env.str("CORRAL_OIDC_GROUPS_CLAIM", default="") or "groups"
CORRAL_OIDC_STAFF_GROUP: str = env.str("CORRAL_OIDC_STAFF_GROUP", default="")
#: Groups to tenant roles: <pattern>=<role>, comma-separated, {tenant} standing for a tenant's slug.
CORRAL_OIDC_TENANT_GROUPS: str = (
    env.str("CORRAL_OIDC_TENANT_GROUPS", default="") or "corral-{tenant}=member,corral-{tenant}-admin=admin"
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # httpx logs each request's full URL at INFO: a notification webhook's URL is its owner's secret.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
