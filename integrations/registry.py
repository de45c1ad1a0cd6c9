"""The kinds of configuration target, each registered once by its own folder under integrations/.

A kind is everything Rackplane needs to know about one outside system: its settings (defaults, which are
secret, the form field for each, validation), what it is sent (`payload`, built from the desired state
rendered once per request), the adapter that applies it, the advice shown when a push fails and whether a
failure can leave it half changed, a one-line summary for the pages, and, for systems that run jobs, all a
job-running kind does, in the same one entry: the Job.backend it serves, its job backend, the renderer of
the embedded mode, its rule for `Job.work` (core.workloads: the jobs API and the job form ask it there),
its job log reader and its tray drainer (integrations.drain: what happens to a drained tray's work).
Nothing outside a kind's folder switches on its name: the target form, the push pipeline, dispatch, the
job logs, the tray drains, the API and the admin ask this registry (in the spirit of NetBox's
`register_data_backend`).

A new kind is a new folder with a `kind.py` that calls `register(Kind(...))`, plus its line in
`integrations.kinds.KIND_MODULES`. What its adapter, job backend and tray drainer implement are the
Protocols of integrations.interfaces; mypy checks each kind's `Kind(...)` against them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext

from core import workloads
from core.workloads import WorkRule
from integrations.interfaces import JobBackend, PushAdapter, TrayDrainer
from integrations.job_output import JobLogs
from integrations.jobs import DispatchRequest
from integrations.versions import Removal

MASK = "••••••••"
DEFAULT_WHAT_TO_DO = "fix the cause and retry the push"


@dataclass(frozen=True)
class Setting:
    """One setting of a kind: its key in ConfigTarget.settings, default, form field and secrecy.

    `form_name` is the field's name in the target form, unique across kinds (default: the key).
    """

    key: str
    default: Any
    field: Callable[[], forms.Field]
    secret: bool = False
    form_name: str = ""

    @property
    def name(self) -> str:
        return self.form_name or self.key


@dataclass(frozen=True)
class Kind:
    name: str
    label: str
    settings: tuple[Setting, ...]
    # (values with every key, defaults filled; errors to add to) -> the cleaned values
    clean: Callable[[dict, dict], dict]
    # (ConfigTarget, cleaned values) -> the adapter that pushes to it
    adapter: Callable[[Any, dict], PushAdapter]
    # (integrations.pushes.Rendered, cleaned values) -> what is pushed (JSON)
    payload: Callable[[Any, dict], dict]
    # masked values -> one line saying where the target points (never a secret)
    summary: Callable[[dict], str]
    what_to_do: str = DEFAULT_WHAT_TO_DO
    # a failed push leaves the target exactly as it was; False: what was done before the failure stays (no
    # transactions on that system) and the push page points to the log for it
    atomic: bool = True
    # the desired state must include the fabric (GPU UUIDs per partition) for this kind's payload
    needs_fabric: bool = False
    # systems that run jobs: the Job.backend they serve and (cleaned values) -> a job backend, or None when
    # this target's settings do not run jobs (e.g. a Slurm target without slurmrestd)
    backend: str = ""
    job_backend: Callable[[dict], JobBackend | None] | None = None
    # the exact request the backend would get, as text, for the embedded mode (no live target): jobs are
    # written to RACKPLANE_RENDER_DIR/jobs/<name><job_file_suffix>
    render_job: Callable[[DispatchRequest], str] | None = None
    job_file_suffix: str = ".txt"
    # its jobs run under their department's QOS (`DispatchRequest.qos`, integrations.dispatch.job_qos), as
    # rendered; a live backend says so itself (`submits_qos`: Slurm's only with accounting)
    job_qos: bool = False
    short_label: str = ""  # in messages about jobs: "Slurm (prod-ctl)"
    # the rule for Job.work of `backend` (validator, JSON Schema, example), registered with core.workloads so
    # that the layers below integrations (the jobs API, the job form) can ask it
    work: WorkRule | None = None
    # (job backend, scheduling.models.Job, limit in bytes or None) -> the job's output
    read_logs: Callable[[JobBackend, Any, int | None], JobLogs] | None = None
    # (cleaned settings) -> its tray drainer: what a drained, resumed or reserved tray means to this system
    # and the work running on it (integrations.drain)
    drainer: Callable[[dict], TrayDrainer] | None = None
    order: int = 100
    # (integrations.rendering.Rendered with a scope, cleaned values) -> the part of the payload that belongs
    # to the scope's racks (their slice), applied on top of what the target holds; None: this kind is always
    # sent the whole payload (whole files). The adapter finds {"scope": {"racks": [...]}} in such a payload.
    scoped_payload: Callable[[Any, dict], dict] | None = None
    # payload -> a few lines saying what a push carries (the push page)
    describe: Callable[[dict], list[str]] = lambda payload: describe_files(payload)
    # Versions (integrations.versions, the versions page): the facts its check keeps that are versions, as
    # (key, label); (facts, cleaned settings) -> what Rackplane speaks to it; the removals ahead that can
    # touch it, each dated and with its source.
    version_facts: tuple[tuple[str, str], ...] = ()
    uses: Callable[[dict, dict], str] = lambda facts, settings: ""
    removals: tuple[Removal, ...] = ()

    def defaults(self) -> dict:
        return {setting.key: setting.default for setting in self.settings}

    def secret_keys(self) -> set[str]:
        return {setting.key for setting in self.settings if setting.secret}


def describe_files(payload: dict) -> list[str]:
    """A line per file with its size (a stored payload's files say theirs without being read)."""
    files = payload.get("files") or {}
    size = getattr(files, "size", None) or (lambda name: len(files[name].encode()))
    return [f"{name} · {size(name):,} bytes" for name in sorted(files)]


_KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Register a kind (once: a second registration of the same name is a programming error)."""
    if kind.name in _KINDS and _KINDS[kind.name] is not kind:
        raise ValueError(f"a target kind named {kind.name!r} is registered already")
    names = {s.name for other in _KINDS.values() if other.name != kind.name for s in other.settings}
    clash = sorted(names & {s.name for s in kind.settings})
    if clash:
        raise ValueError(f"form field names of kind {kind.name!r} are used by another kind: {clash}")
    if kind.work is not None and kind.work.backend != kind.backend:
        raise ValueError(
            f"kind {kind.name!r} serves {kind.backend!r} jobs but its work rule is for {kind.work.backend!r}"
        )
    _KINDS[kind.name] = kind
    if kind.work is not None:
        workloads.register_rule(kind.work)
    return kind


def unregister(name: str) -> None:
    kind = _KINDS.pop(name, None)
    if kind is not None and kind.work is not None:
        workloads.unregister_rule(kind.work)


def kinds() -> list[Kind]:
    return sorted(_KINDS.values(), key=lambda kind: (kind.order, kind.name))


def names() -> list[str]:
    return [kind.name for kind in kinds()]


def choices() -> list[tuple[str, str]]:
    return [(kind.name, gettext(kind.label)) for kind in kinds()]


def get(name: str) -> Kind:
    try:
        return _KINDS[name]
    except KeyError:
        raise ValidationError(
            {"kind": f"unknown target kind {name!r} (known: {', '.join(names())})"}
        ) from None


def is_kind(name: str) -> bool:
    return name in _KINDS


def label(name: str) -> str:
    """The kind's label in the reader's language (each kind marks its label with gettext_noop)."""
    return gettext(_KINDS[name].label) if name in _KINDS else name


def clean_settings(kind_name: str, raw: dict) -> dict:
    """Validate a target's settings for its kind and fill the defaults; ValidationError keyed by setting."""
    kind = get(kind_name)
    if not isinstance(raw, dict):
        raise ValidationError("settings must be an object")
    defaults = kind.defaults()
    errors: dict[str, str] = {}
    for key in sorted(set(raw) - set(defaults)):
        errors[key] = f"is not a setting of a {kind.name} target (known: {', '.join(defaults)})"
    values = {**defaults, **{k: v for k, v in raw.items() if k in defaults}}
    out = kind.clean(values, errors)
    if errors:
        raise ValidationError({key: [message] for key, message in errors.items()})
    return out


def mask_settings(kind_name: str, values: dict) -> dict:
    """The settings as pages, the API and logs may show them: secrets replaced by a mask (or empty)."""
    secret = _KINDS[kind_name].secret_keys() if kind_name in _KINDS else set()
    return {key: (MASK if value else "") if key in secret else value for key, value in (values or {}).items()}


def backend_targets(backend: str) -> list[str]:
    """Names of the kinds whose targets run jobs of `backend` (Job.backend)."""
    return [kind.name for kind in kinds() if kind.backend == backend and kind.job_backend is not None]


# --- job-running kinds: one entry each, with every capability ------------------------------------------

# What a kind that runs jobs provides, each a field of its Kind (JOB_CAPABILITIES: tests check them all).
JOB_CAPABILITIES = ("job_backend", "render_job", "work", "read_logs", "drainer")


def job_kinds() -> list[Kind]:
    """The registered kinds that run jobs (a Job.backend), in their order."""
    return [kind for kind in kinds() if kind.backend]


def backends() -> list[str]:
    """Every Job.backend a registered kind serves, in the kinds' order, each once."""
    return list(dict.fromkeys(kind.backend for kind in job_kinds()))


def backend_choices() -> list[tuple[str, str]]:
    """(Job.backend, label) for each backend a registered kind serves."""
    labels: dict[str, str] = {}
    for kind in job_kinds():
        labels.setdefault(kind.backend, kind.short_label or kind.label)
    return list(labels.items())


def job_kind(backend: str) -> Kind | None:
    """The kind that serves Job.backend `backend` (the first, when several do), or None."""
    return next((kind for kind in job_kinds() if kind.backend == backend), None)


# --- tray drainers: drain, resume and maintenance windows of a compute tray (integrations.drain) --------


def drainer_kinds() -> list[str]:
    """Names of the registered kinds that drain trays (Kind.drainer)."""
    return [kind.name for kind in kinds() if kind.drainer is not None]


def drainer(kind_name: str) -> Callable[[dict], TrayDrainer]:
    """The tray drainer factory of a kind among `drainer_kinds()`; KeyError for any other."""
    factory = _KINDS[kind_name].drainer
    if factory is None:
        raise KeyError(f"target kind {kind_name!r} drains no trays")
    return factory
