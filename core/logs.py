"""Request ids and structured logs: one JSON object per line (LOG_FORMAT=json), carried into Celery tasks.

A request's id comes from its `X-Request-ID` header when that is a sane token (1-128 characters of letters,
digits and `._:-`; a load balancer or the caller chose it), else a fresh one; the response echoes it. It is
kept in a context variable while the request runs, so every log line written meanwhile carries it
(`RequestContextFilter`), and every Celery task sent meanwhile carries it in a message header
(`REQUEST_ID_TASK_HEADER`), so the worker's lines for that task carry it too. A task started by the beat has
none. docs/metrics.md, "Logs".
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from datetime import UTC, datetime

from celery import signals
from celery._state import get_current_task
from django.conf import settings
from django.utils.functional import SimpleLazyObject, empty

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_TASK_HEADER = "rackplane_request_id"
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

access_log = logging.getLogger("rackplane.requests")

# What a record may carry besides the message, in the order a JSON line lists them.
EXTRA_FIELDS = ("method", "path", "status", "duration_ms", "user_id", "task", "task_id")


def valid_request_id(value: str | None) -> str | None:
    """`value` when it is an acceptable request id, else None (too long, empty, or other characters)."""
    if value and _VALID_REQUEST_ID.fullmatch(value):
        return value
    return None


def new_request_id() -> str:
    return uuid.uuid4().hex


class RequestContextFilter(logging.Filter):
    """Puts the current request id (and, in a worker, the task) on every record a handler emits."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id.get()
        if getattr(record, "task_id", None) is None:
            task = get_current_task()
            if task is not None and task.request.id:
                record.task = task.name
                record.task_id = task.request.id
        return True


# A refused request's line is cut to this many characters (a client's 5,000-character Host header is not
# copied into the log whole).
CLIENT_ERROR_CHARS = 500


class ClientErrorFilter(logging.Filter):
    """Django logs a refused request (403 PermissionDenied, 400 SuspiciousOperation ...) with the exception's
    whole traceback, some at ERROR (a wrong Host header: django.security.DisallowedHost): in production every
    member who opens an admin page would write one, burying the real errors and waking whoever alerts on
    errors. A 4xx is one WARNING line (method, path, status, or the refusal), without the traceback and cut to
    CLIENT_ERROR_CHARS; a 5xx keeps everything."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if not (isinstance(status, int) and 400 <= status < 500):
            return True
        record.exc_info = None
        record.exc_text = None
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        message = record.getMessage()
        if len(message) > CLIENT_ERROR_CHARS:
            record.msg, record.args = message[:CLIENT_ERROR_CHARS] + "...", ()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id, then whichever of
    method, path, status, duration_ms, user_id, task, task_id the record has, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for name in EXTRA_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def _user_id(request) -> int | None:
    """The signed-in user's id, without loading a session the request itself never looked at."""
    user = request.__dict__.get("user")
    if user is None or (isinstance(user, SimpleLazyObject) and user._wrapped is empty):
        return None
    return user.pk if getattr(user, "is_authenticated", False) else None


class RequestIdMiddleware:
    """Gives each request its id (see the module docstring), echoes it, and writes one access-log line
    (`rackplane.requests`, INFO) when settings.RACKPLANE_ACCESS_LOG is on (default with LOG_FORMAT=json)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = valid_request_id(request.headers.get(REQUEST_ID_HEADER)) or new_request_id()
        request.request_id = request_id
        token = current_request_id.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response.headers[REQUEST_ID_HEADER] = request_id
            if getattr(settings, "RACKPLANE_ACCESS_LOG", False):
                access_log.info(
                    "%s %s %s",
                    request.method,
                    request.path,
                    response.status_code,
                    extra={
                        "method": request.method,
                        "path": request.path,
                        "status": response.status_code,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                        "user_id": _user_id(request),
                    },
                )
            return response
        finally:
            current_request_id.reset(token)


# --- Celery: the request id travels with the task -----------------------------------------------------------


@signals.before_task_publish.connect(dispatch_uid="rackplane-request-id-publish")
def _add_request_id_header(headers=None, **kwargs):
    request_id = current_request_id.get()
    if request_id and headers is not None:
        headers.setdefault(REQUEST_ID_TASK_HEADER, request_id)


_task_tokens: dict[str, contextvars.Token] = {}


def _task_request_id(task) -> str | None:
    request = task.request
    value = getattr(request, REQUEST_ID_TASK_HEADER, None) or (request.headers or {}).get(
        REQUEST_ID_TASK_HEADER
    )
    return valid_request_id(value)


@signals.task_prerun.connect(dispatch_uid="rackplane-request-id-prerun")
def _task_started(task_id=None, task=None, **kwargs):
    # An eager task (no broker) runs inside the request: the id is already current and stays so.
    request_id = _task_request_id(task) if task is not None else None
    if request_id and task_id:
        _task_tokens[task_id] = current_request_id.set(request_id)


@signals.task_postrun.connect(dispatch_uid="rackplane-request-id-postrun")
def _task_finished(task_id=None, **kwargs):
    token = _task_tokens.pop(task_id, None) if task_id else None
    if token is not None:
        current_request_id.reset(token)


def _django_logging(**kwargs):
    """Celery's setup_logging: keep (re-apply) Django's LOGGING instead of Celery's own format."""
    import logging.config

    logging.config.dictConfig(settings.LOGGING)


def json_logs_in_workers(app) -> None:
    """With LOG_FORMAT=json a worker and the beat log through Django's LOGGING (JSON lines with request_id,
    task and task_id) instead of Celery's text format; with text logs Celery keeps its own."""

    @app.on_after_configure.connect(weak=False)
    def _choose(sender, **kwargs):
        if getattr(settings, "LOG_FORMAT", "text") == "json":
            signals.setup_logging.connect(_django_logging, weak=False, dispatch_uid="rackplane-json-logs")
