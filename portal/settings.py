"""Rackplane settings, read from the environment (django-environ).

Embedded defaults are for `make run`: SQLite under var/, configs rendered to var/. `make run` writes
var/dev.env (DEBUG=1, the filesystem broker under var/celery/), read here when present so that manage.py and
celery in this clone run in development mode too; the process environment wins over it, and
RACKPLANE_DEV_ENV names another file or, "0", none (the test suite sets it). Without a broker Celery runs
tasks eagerly. Production mode (DEBUG off) refuses to start without a random SECRET_KEY and explicit
ALLOWED_HOSTS; RACKPLANE_TLS=1 turns on the HTTPS group (docs/deployment/settings.md).
"""

import math
from collections import Counter
from datetime import timedelta
from pathlib import Path

import environ
import plotly
from django.core.exceptions import ImproperlyConfigured

from core import task_names  # every Celery task's name (no Django import)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()

# The development environment `make run` leaves behind (scripts/run.sh); variables already set win.
DEV_ENV_FILE = env.str("RACKPLANE_DEV_ENV", default=str(VAR_DIR / "dev.env"))
if DEV_ENV_FILE != "0" and Path(DEV_ENV_FILE).is_file():
    environ.Env.read_env(DEV_ENV_FILE, overwrite=False)

# A key that is only good for a developer's laptop; production refuses it.
DEV_SECRET_KEY = "rackplane-insecure-development-key"

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
# Blank entries (ALLOWED_HOSTS=" " or a trailing comma) are dropped, not served.
ALLOWED_HOSTS = [host.strip() for host in env.list("ALLOWED_HOSTS", default=[]) if host.strip()]


def secret_key_weakness(key: str) -> str | None:
    """Why `key` is not good enough for production, or None.

    A heuristic that catches placeholders, typed keys and repeated patterns ('a' * 32, a word twice), not a
    proof of randomness: at least 50 characters (Django's own deploy check), at least 10 different ones, at
    least 3 bits of Shannon entropy per character (a random hex key has about 3.8, `secrets.token_urlsafe(50)`
    about 5.3), and no run of 8 characters that appears twice.
    """
    if not key:
        return "it is empty"
    if key == DEV_SECRET_KEY or key.startswith("django-insecure-"):
        return "it is a development key"
    if len(key) < 50:
        return f"it has {len(key)} characters, fewer than 50"
    if len(set(key)) < 10:
        return f"it uses only {len(set(key))} different characters, fewer than 10"
    bits_per_character = -sum(n / len(key) * math.log2(n / len(key)) for n in Counter(key).values())
    if bits_per_character < 3.0:
        return f"it has {bits_per_character:.1f} bits of entropy per character, fewer than 3"
    runs = [key[start : start + 8] for start in range(len(key) - 7)]
    if len(set(runs)) < len(runs):
        return "it repeats a run of 8 characters"
    return None


if DEBUG:
    SECRET_KEY = SECRET_KEY or DEV_SECRET_KEY
    ALLOWED_HOSTS = ALLOWED_HOSTS or ["127.0.0.1", "localhost"]
else:
    if weakness := secret_key_weakness(SECRET_KEY):
        raise ImproperlyConfigured(
            f"SECRET_KEY is missing or is the development default, or too weak ({weakness}): production mode "
            "(DEBUG off) needs a random key in the SECRET_KEY environment variable, made with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`."
        )
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured(
            "ALLOWED_HOSTS is empty: production mode (DEBUG off) needs the host names this portal serves, "
            "comma-separated, in the ALLOWED_HOSTS environment variable."
        )
    if wildcards := [host for host in ALLOWED_HOSTS if "*" in host]:
        raise ImproperlyConfigured(
            f"ALLOWED_HOSTS contains a wildcard ({', '.join(wildcards)}): production mode (DEBUG off) needs "
            "the exact host names this portal serves, comma-separated, in the ALLOWED_HOSTS environment "
            "variable."
        )

INSTALLED_APPS = [
    "portal.admin_site.RackplaneAdminConfig",  # django.contrib.admin, with the portal's 403
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "portal.admin_site.SignInLockoutConfig",  # django-axes, with a translated name
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "django_prometheus",
    "core",
    "inventory",
    "tenancy",
    "scheduling",
    "integrations",
    "portal",
]

MIDDLEWARE = [
    # First: /healthz, /readyz and /metrics are answered before the host check, HTTPS redirect, session and
    # login (probes come with a pod IP as Host; portal.ops.health).
    "portal.ops.health.ProbeMiddleware",
    # The request id (X-Request-ID) for logs, the response and the Celery tasks sent (core.logs).
    "core.logs.RequestIdMiddleware",
    # A NUL in the path or query string: 400 before any lookup (PostgreSQL text cannot hold one).
    "portal.web.middleware.NullCharacterMiddleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.web.middleware.ContentSecurityPolicyMiddleware",
    # WhiteNoise, answering one-byte ranges too (portal/web/static_files.py).
    "portal.web.static_files.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The viewer's language (the header's switch, else the browser's); after the session, before common.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.web.middleware.LoginRequiredMiddleware",
    # Times in the viewer's time zone (the browser's, kept in a cookie by static/portal/ux.js); UTC without.
    "portal.web.middleware.ViewerTimezoneMiddleware",
    # DEBUG on: a 404 is the portal's page with the menu, not Django's list of every URL pattern.
    "portal.web.middleware.DevErrorPages",
    # A GET on a POST-only address: the portal's 405 page, not an empty body the browser replaces.
    "portal.web.method_not_allowed.MethodNotAllowedPage",
    # An API operation given a query parameter it does not read: a 400 naming it, before the view runs.
    "portal.web.middleware.KnownQueryParameters",
    # A view that loses the database answers 503 with the reason (portal.web.middleware).
    "portal.web.middleware.DatabaseUnavailableMiddleware",
    "core.audit.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    # Last (django-axes): turns a locked-out sign-in into its 429 page (core.throttling).
    "axes.middleware.AxesMiddleware",
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
                "portal.web.context_processors.capacity",
                "portal.web.context_processors.removals",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'rackplane.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # The web server, the Celery worker and the beat's tasks share the file (`make run`). WAL lets readers go
    # on while one writes; IMMEDIATE takes the write lock when a transaction starts (no deadlock when two
    # read-then-write transactions meet); a writer waits up to `timeout` seconds for the lock instead of
    # failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {})["init_command"] = "PRAGMA journal_mode=WAL;"
    DATABASES["default"]["OPTIONS"].setdefault("transaction_mode", "IMMEDIATE")
    DATABASES["default"]["OPTIONS"].setdefault("timeout", 20)
else:
    # Several replicas (docs/deployment/operations.md): connections kept CONN_MAX_AGE seconds (0: one per
    # request) and checked before reuse, so a restarted PostgreSQL costs the requests in flight (a 503,
    # portal.web.middleware) and nothing after: the next request opens a fresh connection by itself.
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # No JIT compilation (PostgreSQL's `jit`, on by default since 12): it pays off for long analytical
    # queries, and here it was compiling the dashboards' aggregates over the running jobs on every request
    # (issue 32: ~60 ms of a 35 ms query at 10,000 racks). A site's own `options` in DATABASE_URL win.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    if "jit" not in _options.get("options", ""):
        _options["options"] = f"{_options.get('options', '')} -c jit=off".strip()
# Query and connection metrics (/metrics, django-prometheus): its wrappers of the same backends (the vendor
# and features are Django's own). RACKPLANE_DB_METRICS=0 uses Django's backends unwrapped.
if env.bool("RACKPLANE_DB_METRICS", default=True):
    for _database in DATABASES.values():
        _vendor = _database["ENGINE"].removeprefix("django.db.backends.")
        if _vendor in ("sqlite3", "postgresql"):
            _database["ENGINE"] = f"django_prometheus.db.backends.{_vendor}"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# English and Japanese (every page, form and message marked for translation; the catalogues are each app's
# locale/ja and the project's locale/ja, compiled .mo files kept next to them). The language comes from the
# switch in the header (a cookie, django.views.i18n.set_language) or else the browser's Accept-Language.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("ja", "日本語")]
LOCALE_PATHS = [BASE_DIR / "locale"]
LANGUAGE_COOKIE_NAME = "rackplane_language"
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = "UTC"
# A date and time Django formats itself (the admin's lists and forms) names its zone ("... 19:28 JST").
FORMAT_MODULE_PATH = ["portal.formats"]
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
# `manage.py collectstatic` target in production (WhiteNoise serves it; without it, from the finders).
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "static")))
# plotly.js comes from the plotly package itself, served by the portal (never a CDN).
STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# The finders (the source files, fresh on every edit) in development and wherever nothing was collected; once
# `collectstatic` has filled STATIC_ROOT (the image's build step), only what it collected, with the gzip and
# Brotli forms it wrote beside each file: with the finders on too, WhiteNoise lets each source file (no
# compressed form beside it) replace the collected one, and every file went uncompressed.
WHITENOISE_USE_FINDERS = DEBUG or not STATIC_ROOT.is_dir()
# plotly's 4.7 MB bundle also under a content-hashed name (core.static_assets), cached for a year.
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "core.static_assets.HashedPlotlyFinder",
]
# A name carrying a 12-hex content hash never changes content: WhiteNoise serves it `immutable`, 10 years.
WHITENOISE_IMMUTABLE_FILE_TEST = r"\.[0-9a-f]{12}\.[A-Za-z0-9]+$"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Tokens first: an anonymous REST client gets 401 with a WWW-Authenticate header, not 403. Personal
        # tokens (rpt_...) before the single token, whose class refuses any key it does not know; the
        # OpenID provider's bearer tokens (only when single sign-on is configured) after both.
        "core.tokens.PersonalTokenAuthentication",
        "core.tokens.ExpiringTokenAuthentication",
        "tenancy.auth.OIDCBearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The API is JSON: one parser for every view, with size, depth and charset limits (core.parsers); no
    # form or multipart bodies, which cannot carry nested fields (the schema advertises application/json).
    "DEFAULT_PARSER_CLASSES": ["core.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # `?format=` naming a format the operation does not render: a 406 naming its formats, not DRF's 404.
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "core.api.ContentNegotiation",
    # core.tables.SortFilter: `?sort=` on the lists that name their sortable columns (`sort_fields`). A
    # query parameter an operation does not read is a 400 before it runs (portal.web.middleware).
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "core.tables.SortFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.StandardPagination",
    # drf-spectacular's, documenting the error answers every operation can give (core.openapi).
    "DEFAULT_SCHEMA_CLASS": "core.openapi.AutoSchema",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Rackplane API",
    "DESCRIPTION": (
        "Inventory, fabric discovery, tenancy and jobs for NVL72 rack-scale GPU systems.\n\n"
        "**Authentication.** Make a personal API token on the portal's API tokens page (`/account/tokens/`: "
        "click your username in the top bar), give it a name and an expiry, copy the key (`rpt_...`, shown "
        "once) and send it as `Authorization: Token rpt_...`. Revoke it on the same page. An expired or "
        "revoked token is refused with 401 saying which. When the portal signs in through the organisation's "
        "OpenID provider, machine clients may instead send that provider's access token as "
        "`Authorization: Bearer <token>`. A signed-in browser session works too (with its CSRF token)."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a `state` field with different choices: name each enum after its model.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "scheduling.choices.JobState",
        "TrayStateEnum": "inventory.choices.TrayState",
        # A GPU's MIG mode now and after its next reset (the GPU API, the discovery report's `mig`).
        "MigModeEnum": "inventory.choices.MigMode",
        # A job's topology and its fallback topology are one choice set.
        "TopologyEnum": "scheduling.choices.Topology",
        # A department role and a project role (tenancy.api.projects) are both `role`.
        "RoleEnum": "core.access.Role",
        "ProjectRoleEnum": "tenancy.choices.ProjectRole",
        # The job request is one schema per backend (scheduling.api.serializers), each with its own value.
        "BackendEnum": "scheduling.choices.Backend",
        "SlurmBackendEnum": ["slurm"],
        "KubernetesBackendEnum": ["kubernetes"],
    },
    "SCHEMA_PATH_PREFIX": "/api/v1",
}

# Celery: eager (in-process) unless a broker is configured. `make run` configures kombu's filesystem
# transport (`filesystem://`, a broker that needs no server): messages are files under var/celery/, consumed
# by the worker scripts/run.sh starts beside the web server and the beat.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_BROKER_DIR = VAR_DIR / "celery"
if CELERY_BROKER_URL.startswith("filesystem:"):
    for folder in ("queue", "processed", "control"):
        (CELERY_BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)
    # kombu's filesystem transport, each message renamed into the queue once written (portal.broker).
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # One folder both ways: producers and the worker share the queue.
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        # A message is claimed by renaming it into processed/ (atomic on one file system, so one consumer
        # gets it); scripts/run.sh empties the folder when it starts.
        "store_processed": True,
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        "control_folder": str(CELERY_BROKER_DIR / "control"),  # exchange bindings (remote control)
        "polling_interval": 0.5,  # seconds between the worker's looks at the queue folder
    }
    CELERY_BEAT_SCHEDULE_FILENAME = str(CELERY_BROKER_DIR / "beat-schedule")  # when each entry last ran
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE: dict = {
    "scrape-dcgm-exporters": {"task": task_names.SCRAPE_EXPORTERS, "schedule": 60.0},
    "prune-telemetry": {"task": task_names.PRUNE_TELEMETRY, "schedule": 3600.0},
    "snapshot-quotas": {"task": task_names.SNAPSHOT_QUOTAS, "schedule": 300.0},
    # Each department's idle GPUs, counted once a minute for every page that shows them (scheduling.usage
    # keep_idle_counts; PostgreSQL only).
    "keep-idle-counts": {"task": task_names.KEEP_IDLE_COUNTS, "schedule": 60.0},
    "follow-partition-plans": {"task": task_names.FOLLOW_ACTIVE_PLANS, "schedule": 30.0},
    # Partition plans scheduled for a maintenance window: started, applied or expired (integrations.plans
    # .windows).
    "run-plan-windows": {"task": task_names.RUN_PLAN_WINDOWS, "schedule": 30.0},
    # Config pushes: requeue pushes whose worker was lost, send retries that are due (integrations.pushes).
    "retry-stale-pushes": {"task": task_names.RETRY_STALE_PUSHES, "schedule": 60.0},
    # Versions a target uses that a coming release removes (integrations.versions): told once a day at most.
    "watch-removals": {"task": task_names.WATCH_REMOVALS, "schedule": 86400.0},
    # Jobs: a scheduling pass every minute besides the ones submissions and completions trigger; job state
    # read back from Slurm/Kubernetes, backend cancels and dispatch retries every 30 s
    # (integrations.dispatch).
    "schedule-jobs": {"task": task_names.SCHEDULE_JOBS_PERIODICALLY, "schedule": 60.0},
    "sync-jobs": {"task": task_names.SYNC_JOBS, "schedule": 30.0},
    # Notifications (core.notifications): retries that are due, messages lost while the broker was down.
    "retry-notifications": {"task": task_names.RETRY_NOTIFICATIONS, "schedule": 30.0},
}
# Every beat interval multiplied by this (tests/stack runs the real beat with 0.1: a minute becomes 6 s).
RACKPLANE_BEAT_INTERVAL_SCALE = env.float("RACKPLANE_BEAT_INTERVAL_SCALE", default=1.0)
# The demo's GPUs keep reporting utilization (portal.tasks.simulate_demo_telemetry): `make run` turns it on
# in var/dev.env. Off by default: production and the tests record only what real exporters send.
RACKPLANE_DEMO_TELEMETRY = env.bool("RACKPLANE_DEMO_TELEMETRY", default=False)
if RACKPLANE_DEMO_TELEMETRY:  # the demo's simulated DCGM exporters; nothing to send anywhere else
    CELERY_BEAT_SCHEDULE["simulate-demo-telemetry"] = {
        "task": task_names.SIMULATE_DEMO_TELEMETRY,
        "schedule": 60.0,
    }
if RACKPLANE_BEAT_INTERVAL_SCALE != 1.0:
    for _entry in CELERY_BEAT_SCHEDULE.values():
        _entry["schedule"] = _entry["schedule"] * RACKPLANE_BEAT_INTERVAL_SCALE
# Preemption bounds (scheduling.pass_inputs.engine_options, docs/scheduling.md): a running job of a priority
# class is not preempted for another department's guarantee before it has run this many minutes
# ("train=30"; KAI's reclaim-min-runtime, Slurm's PreemptExemptTime), and an in-quota job preempts borrowed
# work only once it has waited RACKPLANE_PREEMPT_AFTER_MINUTES since its submission. 0 or unset: at once.
RACKPLANE_MIN_RUNTIME_MINUTES = env.dict(
    "RACKPLANE_MIN_RUNTIME_MINUTES", default={}
)  # checked: scheduling.checks
RACKPLANE_PREEMPT_AFTER_MINUTES = env.str("RACKPLANE_PREEMPT_AFTER_MINUTES", default="0")  # checked, as above
# Migrating to tenancy 0009 (docs/identifiers.md) renames the namespaces and Slurm accounts of projects with
# jobs holding GPUs only with RACKPLANE_ALLOW_PROJECT_RENAME=1.
RACKPLANE_ALLOW_PROJECT_RENAME = env.str("RACKPLANE_ALLOW_PROJECT_RENAME", default="") == "1"
# Historical fair share (tenancy.usage_decay, docs/simulator.md): departments' GPU usage decays with this
# half-life (days; 7 is Slurm's PriorityDecayHalfLife default; 0 turns it off). Department pages show it to
# their leads and admins; the pass orders borrowers by it only when RACKPLANE_FAIRSHARE_ORDERS_BORROWERS is
# on (off by default: the trace replay did not show it better, docs/simulator.md).
_FAIRSHARE_HALF_LIFE_DAYS = env.float("RACKPLANE_FAIRSHARE_HALF_LIFE_DAYS", default=7.0)
RACKPLANE_FAIRSHARE_HALF_LIFE_S = _FAIRSHARE_HALF_LIFE_DAYS * 86400 if _FAIRSHARE_HALF_LIFE_DAYS > 0 else None
RACKPLANE_FAIRSHARE_ORDERS_BORROWERS = env.bool("RACKPLANE_FAIRSHARE_ORDERS_BORROWERS", default=False)
# Unchanged node reports (heartbeats) queue the tray's last-seen time on the broker; the beat's worker writes
# the queue every this many seconds (inventory.ingest.heartbeats); 0 writes each at once, in the request.
RACKPLANE_HEARTBEAT_BATCH_S = env.float("RACKPLANE_HEARTBEAT_BATCH_S", default=5.0)
if RACKPLANE_HEARTBEAT_BATCH_S > 0:
    CELERY_BEAT_SCHEDULE["flush-heartbeats"] = {
        "task": task_names.FLUSH_HEARTBEATS,
        "schedule": RACKPLANE_HEARTBEAT_BATCH_S,
    }
# Work a worker was killed in (integrations.tasks, docs/deployment/operations.md): a running push holds a
# lease its worker renews every fifth of it; a push whose lease ran out is queued again by
# retry_stale_pushes. A placed job whose dispatch never completed is sent again by sync_jobs after this many
# seconds.
RACKPLANE_PUSH_LEASE_SECONDS = env.int("RACKPLANE_PUSH_LEASE_SECONDS", default=300)
RACKPLANE_DISPATCH_LOST_AFTER_SECONDS = env.int("RACKPLANE_DISPATCH_LOST_AFTER_SECONDS", default=60)

# Email (notifications): EMAIL_URL as django-environ reads it (smtp://user:password@host:587, smtp+tls://...,
# smtp+ssl://...); development (DEBUG=1, `make run`) prints messages on the console instead.
vars().update(env.email_url("EMAIL_URL", default="consolemail://" if DEBUG else "smtp://localhost:25"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="rackplane@localhost")
SERVER_EMAIL = env.str("SERVER_EMAIL", default=DEFAULT_FROM_EMAIL)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
# Webhooks (core.notifications): seconds to wait for an endpoint's answer; whether endpoints may be loopback,
# private or link-local addresses (refused in production unless set: a request forgery could reach internal
# services; allowed in development).
RACKPLANE_NOTIFICATION_TIMEOUT = env.float("RACKPLANE_NOTIFICATION_TIMEOUT", default=10.0)
RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = env.bool(
    "RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS", default=DEBUG
)

# Where the embedded directory target renders configuration.
RACKPLANE_RENDER_DIR = Path(env.str("RACKPLANE_RENDER_DIR", default=str(VAR_DIR / "rendered")))

# Logs (docs/metrics.md, "Logs"): LOG_FORMAT=json writes one JSON object per line (time, level, logger,
# message, request_id, and method/path/status/duration_ms/user_id on the access lines) for a log collector;
# text (the default) is for a terminal. Every line carries the request id (core.logs), in workers too.
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT is {LOG_FORMAT!r}: it must be text or json.")
# One line per request (logger rackplane.requests); on with JSON logs (runserver prints its own otherwise).
RACKPLANE_ACCESS_LOG = env.bool("RACKPLANE_ACCESS_LOG", default=LOG_FORMAT == "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_context": {"()": "core.logs.RequestContextFilter"},
        "client_errors": {"()": "core.logs.ClientErrorFilter"},
    },
    "formatters": {"json": {"()": "core.logs.JsonFormatter"}},
    # A refused request (4xx) is one line, not a traceback (core.logs.ClientErrorFilter), whichever logger
    # wrote it: on the handler, since a logger's filter does not see its children's records (a wrong Host
    # header is django.security.DisallowedHost's).
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_context", "client_errors"],
            **({"formatter": "json"} if LOG_FORMAT == "json" else {}),
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# Probes and metrics (portal.ops.health, core.metrics; docs/metrics.md). /metrics needs this bearer token;
# without
# one only loopback callers of a development portal (DEBUG) may read it. RACKPLANE_READY_REQUIRES_BROKER=0: a
# broker outage shows in /readyz's body without taking the replicas out of service.
RACKPLANE_METRICS_TOKEN = env.str("RACKPLANE_METRICS_TOKEN", default="")
RACKPLANE_READY_REQUIRES_BROKER = env.bool("RACKPLANE_READY_REQUIRES_BROKER", default=True)
# The folder gunicorn's workers share their request metrics in (`rackplane serve` sets it, portal.ops.cli);
# prometheus_client reads the same variable from the process's environment. None: one process's own.
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="") or None

# Error pages (portal.pages.home): never a template that needs the request; JSON under /api/.
CSRF_FAILURE_VIEW = "portal.pages.home.csrf_failure"

# Security headers, in every mode (the development server is the place to notice a page that breaks them).
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (portal.web.middleware.ContentSecurityPolicyMiddleware): scripts, styles, images and
# fetches from the portal itself only; no inline script (charts are JSON drawn by static/js/portal.js, Swagger
# UI's setup script is its own URL). Style *attributes* stay allowed (bar widths, plotly.js); <style> elements
# only with the exact content the bundled libraries inject, by hash. A new plotly.js or Swagger UI version may
# change them: tests/e2e/test_content_security_policy.py then fails with the new hash.
STYLE_HASHES = [
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # plotly.js: an empty <style> it adds rules to
    "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='",  # plotly.js: its bundled MapLibre stylesheet
    "'sha256-MMpT0iDxyjALd9PdfepImGX3DBfJPXZ4IlDWdPAgtn0='",  # Swagger UI (drf-spectacular-sidecar)
]
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        f"style-src-elem 'self' {' '.join(STYLE_HASHES)}",
        "style-src-attr 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# HTTPS: RACKPLANE_TLS=1 when users reach the portal over HTTPS (the documented production setup) turns on the
# redirect, Secure cookies and HSTS; each SECURE_* variable can still override its setting.
# RACKPLANE_TLS_PROXY=1 when a proxy terminates TLS and sets X-Forwarded-Proto (it must overwrite the header a
# client sends).
RACKPLANE_TLS = env.bool("RACKPLANE_TLS", default=False)
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=RACKPLANE_TLS)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=RACKPLANE_TLS)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=RACKPLANE_TLS)
LANGUAGE_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000 if RACKPLANE_TLS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=RACKPLANE_TLS)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
if env.bool("RACKPLANE_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Browsers' HSTS preload list is the domain owner's decision (hstspreload.org): off unless
# SECURE_HSTS_PRELOAD=1, so `check --deploy` is not asked to warn about it.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

# --- Throttling and tokens (docs/api/access.md) ----------------------------------------------------------
# The default cache holds the API's request counts: locmem is one process's (make run, a single gunicorn
# worker); with several workers or replicas set CACHE_URL=redis://host:6379/2 so that they count together.
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}
# Proxies in front of the portal that append to X-Forwarded-For (1 with RACKPLANE_TLS_PROXY): the client's
# address is the one the outermost of them saw. With none, REMOTE_ADDR (a client-sent header is not trusted).
RACKPLANE_PROXY_COUNT = env.int(
    "RACKPLANE_PROXY_COUNT", default=int(env.bool("RACKPLANE_TLS_PROXY", default=False))
)

# Sign-in lockout (django-axes, failures counted in the database): after RACKPLANE_LOGIN_FAILURE_LIMIT
# failed sign-ins for a username, or from an address, both are refused (429, even with the right password)
# until RACKPLANE_LOGIN_COOLOFF_MINUTES after the last attempt. A successful sign-in clears the count.
# Covers the portal's and the admin's login forms; admins lift a lock in the Django admin or with
# `manage.py axes_reset_username NAME`.
AUTHENTICATION_BACKENDS = [
    "core.throttling.SignInLockoutBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Identity providers (below: each off until configured), after the local accounts.
    "tenancy.auth.OIDCBackend",
    "tenancy.auth.LDAPBackend",
]
AXES_FAILURE_LIMIT = env.int("RACKPLANE_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("RACKPLANE_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "core.throttling.lockout_response"
AXES_CLIENT_IP_CALLABLE = "core.throttling.client_address"
# Successful sign-ins are not kept; failures are (Django admin: Access attempts).
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no banner on every manage.py command
# Lockouts are logged (WARNING); every successful sign-in and cleanup is not.
LOGGING.setdefault("loggers", {})["axes"] = {"level": "WARNING"}

# API request rates (DRF throttles over the default cache): per account, per address for anonymous
# requests, and node agents apart (core.throttling.NodeAgentRateThrottle: not throttled unless
# RACKPLANE_THROTTLE_NODE_AGENT is set, e.g. 120/min per agent token). Over the rate: 429 with Retry-After.
REST_FRAMEWORK |= {
    "DEFAULT_THROTTLE_CLASSES": ["core.throttling.UserRateThrottle", "core.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "user": env.str("RACKPLANE_THROTTLE_USER", default="1200/min"),
        "anon": env.str("RACKPLANE_THROTTLE_ANON", default="60/min"),
        "node-agent": env.str("RACKPLANE_THROTTLE_NODE_AGENT", default="") or None,
    },
    "NUM_PROXIES": RACKPLANE_PROXY_COUNT,
    "EXCEPTION_HANDLER": "core.api.exception_handler",
}

# API tokens (core.tokens): refused (401) RACKPLANE_TOKEN_TTL_DAYS after they were made; owners rotate them.
RACKPLANE_TOKEN_TTL_DAYS = env.int("RACKPLANE_TOKEN_TTL_DAYS", default=90)

# Personal API tokens (core.tokens, the portal's API tokens page): the longest expiry a user may choose.
RACKPLANE_PERSONAL_TOKEN_MAX_DAYS = env.int("RACKPLANE_PERSONAL_TOKEN_MAX_DAYS", default=365)

# Single sign-on (OpenID Connect) and LDAP: the OIDC_* and AUTH_LDAP_* settings (docs/operators/sign-in.md).
from portal.identity_settings import *  # noqa: E402, F403
