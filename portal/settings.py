"""Rackplane settings, read from the environment (django-environ).

Embedded defaults (no environment at all) are for `make run`: SQLite under var/, Celery eager, configs
rendered to var/. Production mode (DEBUG off) refuses to start without a real SECRET_KEY and ALLOWED_HOSTS.
"""

from pathlib import Path

import environ
import plotly
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()

# A key that is only good for a developer's laptop; production refuses it.
DEV_SECRET_KEY = "rackplane-insecure-development-key"

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])

if DEBUG:
    SECRET_KEY = SECRET_KEY or DEV_SECRET_KEY
    ALLOWED_HOSTS = ALLOWED_HOSTS or ["127.0.0.1", "localhost"]
else:
    if not SECRET_KEY or SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 32:
        raise ImproperlyConfigured(
            "SECRET_KEY is missing or is the development default: production mode (DEBUG off) needs a real, "
            "random key of at least 32 characters in the SECRET_KEY environment variable."
        )
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured(
            "ALLOWED_HOSTS is empty: production mode (DEBUG off) needs the host names this portal serves, "
            "comma-separated, in the ALLOWED_HOSTS environment variable."
        )

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "core",
    "inventory",
    "tenancy",
    "scheduling",
    "integrations",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.middleware.LoginRequiredMiddleware",
    "core.audit.AuditMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
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
                "portal.context_processors.capacity",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'rackplane.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # WAL lets the portal read while a Celery task or an ingest writes.
    DATABASES["default"].setdefault("OPTIONS", {})["init_command"] = "PRAGMA journal_mode=WAL;"
    DATABASES["default"]["OPTIONS"].setdefault("transaction_mode", "IMMEDIATE")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
# plotly.js comes from the plotly package itself, served by the portal (never a CDN).
STATICFILES_DIRS = [BASE_DIR / "static", ("plotly", Path(plotly.__file__).parent / "package_data")]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: an anonymous REST client gets 401 with a WWW-Authenticate header, not 403.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.StandardPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Rackplane API",
    "DESCRIPTION": "Inventory, fabric discovery, tenancy and jobs for NVL72 rack-scale GPU systems.",
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
    },
    "SCHEMA_PATH_PREFIX": "/api/v1",
}

# Celery: eager (in-process) unless a broker is configured.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE: dict = {
    "scrape-dcgm-exporters": {"task": "tenancy.tasks.scrape_exporters", "schedule": 60.0},
    "prune-telemetry": {"task": "tenancy.tasks.prune_telemetry", "schedule": 3600.0},
    "snapshot-quotas": {"task": "scheduling.tasks.snapshot_quotas", "schedule": 300.0},
    "follow-partition-plans": {"task": "integrations.tasks.follow_active_plans", "schedule": 30.0},
    # Config pushes: requeue pushes whose worker was lost, send retries that are due (integrations.pushes).
    "retry-stale-pushes": {"task": "integrations.tasks.retry_stale_pushes", "schedule": 60.0},
    # Jobs: a scheduling pass every minute besides the ones submissions and completions trigger; job state
    # read back from Slurm/Kubernetes, backend cancels and dispatch retries every 30 s
    # (integrations.dispatch).
    "schedule-jobs": {"task": "scheduling.tasks.schedule_jobs_periodically", "schedule": 60.0},
    "sync-jobs": {"task": "integrations.tasks.sync_jobs", "schedule": 30.0},
}

# Where the embedded directory target renders configuration.
RACKPLANE_RENDER_DIR = Path(env.str("RACKPLANE_RENDER_DIR", default=str(VAR_DIR / "rendered")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

if not DEBUG:
    SESSION_COOKIE_HTTPONLY = True
    CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
