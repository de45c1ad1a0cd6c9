"""The one rule for a Kubernetes job's work: {"image", "command", "args", "env"}.

`SCHEMA` is the same rule as JSON Schema (the OpenAPI document's `work` for Kubernetes jobs), `EXAMPLE` a
work it accepts; tests/test_openapi.py checks the three agree. What the API server would refuse in a
container is refused here, at submission: the other names in the pod (container, labels, Job name) are
Rackplane's own (integrations.kubernetes.jobs), only the environment's names come from the user.

The environment may not choose the job's devices: the variables the NVIDIA container runtime and CUDA read
to pick GPUs, MIG instances, IMEX channels or driver capabilities (core.devices.DEVICE_VARIABLES, any case)
are refused, since the runtime would hand a container every GPU of its node for `NVIDIA_VISIBLE_DEVICES=all`
whatever the scheduler counted. The GPUs come from the pod's `nvidia.com/gpu` request alone.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping

from django.utils.translation import gettext_lazy as _
from docker_image.digest import InvalidDigest
from docker_image.reference import InvalidReference, Reference

from core.devices import DEVICE_VARIABLE_PREFIXES, DEVICE_VARIABLES
from core.textrule import text_problem
from core.workloads import WorkError, WorkForm, WorkInput, refuse_device_variables, refuse_unknown_keys

WORK_KEYS = frozenset({"image", "command", "args", "env"})
# The distribution reference grammar's longest image: a 255-character name, a 128-character tag and a digest.
MAX_IMAGE = 512

# Kubernetes' IsEnvVarName (k8s.io/apimachinery validation): letters, digits, "_", "-" and ".", not starting
# with a digit, and not ".", ".." nor starting with "..". Servers with RelaxedEnvironmentVariableValidation
# (1.32+) also take any printable ASCII but "="; a name valid here is valid on every version.
# `(?![\s\S])` is the end of the text in Python's and in ECMA-262's regexes alike (`$` also matches before a
# final newline in Python), so the schema's pattern and this rule agree on every name.
ENV_NAME_PATTERN = r"^(?!\.\.)(?!\.(?![\s\S]))[-._a-zA-Z][-._a-zA-Z0-9]*(?![\s\S])"
_ENV_NAME = re.compile(ENV_NAME_PATTERN)
ENV_NAME_RULE = (
    'letters, digits, "_", "-" and ".", not starting with a digit nor "..", and not "." (e.g. NCCL_DEBUG)'
)

# An image is a reference in the distribution grammar (registry/name[:tag][@digest]), the one containerd and
# Docker parse it with; the schema's pattern is that grammar in ECMA-262 words (ASCII only). The rule itself
# is the parser's (`_refuse_image`): it also holds the name's path to 255 characters, refuses a name of 64 hex
# digits and checks a digest's length for its algorithm, so the pattern is looser than the rule, never
# stricter (tests/integrations/kubernetes/test_work_image.py).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_PATTERN = (
    rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?(?![\s\S])"
)
IMAGE_RULE = "registry/name[:tag][@digest], e.g. nvcr.io/nvidia/pytorch:25.01-py3"

# A NUL cannot be stored (PostgreSQL's jsonb) nor passed to a container.
_NO_NUL = "^[^\\u0000]*$"
_STRINGS = {"type": "array", "items": {"type": "string", "pattern": _NO_NUL}, "nullable": True}
SCHEMA = {
    "type": "object",
    "title": "KubernetesWork",
    "description": "The container each pod runs: image, entrypoint (command), its arguments and environment.",
    "properties": {
        "image": {
            "type": "string",
            "pattern": IMAGE_PATTERN,
            "maxLength": MAX_IMAGE,
            "description": f"A container image: {IMAGE_RULE} (lowercase name; the registry defaults to "
            "Docker Hub's).",
        },
        "command": {**_STRINGS, "description": "The entrypoint (the image's when left out)."},
        "args": {**_STRINGS, "description": "Its arguments (the image's when left out)."},
        "env": {
            "type": "object",
            "nullable": True,
            "description": "Environment variables by name; numbers and booleans are passed as they read. "
            f"A name is {ENV_NAME_RULE}. Variables that choose devices are refused, in any case (the "
            f"scheduler assigns GPUs): {', '.join(sorted(DEVICE_VARIABLES))} and "
            f"{', '.join(p + '*' for p in sorted(DEVICE_VARIABLE_PREFIXES))}.",
            # OpenAPI 3.0 has no propertyNames: the names' rule as an extension, in JSON Schema's words.
            "x-propertyNames": {"type": "string", "pattern": ENV_NAME_PATTERN},
            "additionalProperties": {
                "oneOf": [
                    {"type": "string", "pattern": _NO_NUL},
                    {"type": "number"},
                    {"type": "boolean"},
                ]
            },
        },
    },
    "required": ["image"],
    "additionalProperties": False,
}
EXAMPLE = {
    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
    "command": ["torchrun"],
    "args": ["--nproc-per-node=4", "train.py"],
    "env": {"NCCL_DEBUG": "INFO"},
}


def _has_nul(value) -> bool:
    return isinstance(value, str) and "\x00" in value


def is_env_name(name) -> bool:
    return isinstance(name, str) and _ENV_NAME.fullmatch(name) is not None


def _refuse_text(value: str, where: str, *, multiline: bool = True) -> None:
    """The text rule (core.textrule) on what the user wrote into the pod: an image is one line; a command's
    words and the environment's values may hold newlines and tabs (`bash -c` scripts), but no ESC, bidi or
    invisible characters, which would make the job read otherwise on the portal than it runs."""
    problem = text_problem(value, max_length=None if multiline else MAX_IMAGE, multiline=multiline)
    if problem:
        raise WorkError(problem.message(where))


def _refuse_image(image: str) -> None:
    """WorkError unless `image` is a reference containerd would pull (distribution/reference's
    ParseNormalizedNamed, as docker-image-py ports it): "../../etc/passwd", "Busybox" or "x:" never reach
    the API server, where a pod would only fail to start."""
    try:
        Reference.parse_normalized_named(image)
    except (InvalidReference, InvalidDigest) as error:
        reason = str(error.args[0] if error.args else error)
        raise WorkError(
            f'"image": "{image}" is not a container image reference ({reason}); write {IMAGE_RULE}'
        ) from None


def validate_work(work: dict) -> dict:
    refuse_unknown_keys(work, WORK_KEYS, "a Kubernetes job")
    image = work.get("image")
    if not isinstance(image, str) or not image.strip():
        raise WorkError('a Kubernetes job needs "image": a container image')
    if any(c.isspace() or c == "\x00" for c in image):  # a reference holds neither (named, not echoed)
        raise WorkError(f'"image" holds a space, a line break or a NUL character; write {IMAGE_RULE}')
    _refuse_text(image, '"image"', multiline=False)
    _refuse_image(image)
    out: dict = {"image": image}
    for key in ("command", "args"):
        value = work.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) and not _has_nul(v) for v in value):
            raise WorkError(f'"{key}" must be a list of strings')
        for index, word in enumerate(value):
            _refuse_text(word, f'"{key}"[{index}]')
        out[key] = value
    env = work.get("env")
    if env is not None:
        # Kubernetes takes strings; numbers and booleans are written as they read ("3", "true").
        scalar = (str, int, float, bool)
        if not isinstance(env, dict) or not all(
            isinstance(v, scalar) and not _has_nul(v) for v in env.values()
        ):
            raise WorkError('"env" must map names to string values')
        bad = [name for name in env if not is_env_name(name)]
        if bad:
            names = ", ".join(f'"{name}"' for name in bad)
            raise WorkError(
                f'"env": not an environment variable name Kubernetes takes: {names}; a name is '
                f"{ENV_NAME_RULE}"
            )
        refuse_device_variables(env)
        for name, value in env.items():
            if isinstance(value, str):
                _refuse_text(value, f'"env" {name}')
        out["env"] = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in env.items()}
    return out


# --- the job form (scheduling.views.job_form): an image, command and arguments as a shell splits them, and
# the environment one NAME=value a line ---------------------------------------------------------------------


def from_form(values: Mapping[str, str]) -> dict:
    """The work the form's inputs make; WorkError when the words or the environment cannot be read."""
    work: dict = {"image": values.get("image", "").strip()}
    for key in ("command", "args"):
        text = values.get(key, "").strip()
        if text:
            try:
                work[key] = shlex.split(text)
            except ValueError as error:
                raise WorkError(f"the {key} cannot be split into words: {error} (close the quotes)") from None
    env = {}
    for number, line in enumerate(values.get("env", "").splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.strip().partition("=")
        if not sep:
            raise WorkError(f"environment line {number} ({line.strip()!r}) has no '=': write NAME=value")
        env[name.strip()] = value
    if env:
        work["env"] = env
    return work


def to_form(work: dict) -> dict[str, str]:
    # Numbers and booleans as the container reads them (true, not True).
    env = (work.get("env") or {}).items()
    return {
        "image": work.get("image", ""),
        "command": shlex.join(work.get("command") or []),
        "args": shlex.join(work.get("args") or []),
        "env": "\n".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in env),
    }


FORM = WorkForm(
    label="Kubernetes",
    inputs=(
        WorkInput("image", _("Container image (Kubernetes)"), placeholder="nvcr.io/nvidia/pytorch:25.01-py3"),
        WorkInput(
            "command",
            _("Command"),
            placeholder="torchrun",
            help=_("Words as a shell splits them; empty: the image's entrypoint."),
        ),
        WorkInput("args", _("Arguments"), placeholder="--nproc-per-node=4 train.py"),
        WorkInput(
            "env",
            _("Environment"),
            multiline=True,
            rows=3,
            placeholder="NCCL_DEBUG=INFO",
            help=_("One `NAME=value` a line."),
        ),
    ),
    from_form=from_form,
    to_form=to_form,
)
