"""Rackplane settings, read from the environment (django-environ).

Embedded defaults (no environment at all) are for `make run`: SQLite under var/, Celery eager, configs
rendered to var/. Production mode (DEBUG off) refuses to start without a random SECRET_KEY and explicit
ALLOWED_HOSTS; RACKPLANE_TLS=1 turns on the HTTPS group (README, "Production settings").
"""

import math
from collections import Counter
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
    "portal.middleware.ContentSecurityPolicyMiddleware",
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
# `manage.py collectstatic` target in production (WhiteNoise serves it; without it, from the finders).
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "static")))
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
    # One JSON parser for every view, with size, depth and charset limits (core.parsers); DRF's form parsers.
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
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

# Error pages (portal.views): never a template that needs the request; JSON under /api/.
CSRF_FAILURE_VIEW = "portal.views.csrf_failure"

# Security headers, in every mode (the development server is the place to notice a page that breaks them).
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (portal.middleware.ContentSecurityPolicyMiddleware): scripts, styles, images and
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
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000 if RACKPLANE_TLS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=RACKPLANE_TLS)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
if env.bool("RACKPLANE_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Browsers' HSTS preload list is the domain owner's decision (hstspreload.org): off unless
# SECURE_HSTS_PRELOAD=1, so `check --deploy` is not asked to warn about it.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
