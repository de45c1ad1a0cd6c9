"""The one rule for a Kubernetes job's work: {"image", "command", "args", "env"}.

`SCHEMA` is the same rule as JSON Schema (the OpenAPI document's `work` for Kubernetes jobs), `EXAMPLE` a
work it accepts; tests/test_openapi.py checks the three agree.
"""

from __future__ import annotations

from core.workloads import WorkError

WORK_KEYS = frozenset({"image", "command", "args", "env"})

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
            "pattern": "^[^\\s\\u0000\\u001c-\\u001f\\u0085]+$",
            "description": "A container image.",
        },
        "command": {**_STRINGS, "description": "The entrypoint (the image's when left out)."},
        "args": {**_STRINGS, "description": "Its arguments (the image's when left out)."},
        "env": {
            "type": "object",
            "nullable": True,
            "description": "Environment variables; numbers and booleans are passed as they read.",
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


def validate_work(work: dict) -> dict:
    unknown = sorted(set(work) - WORK_KEYS)
    if unknown:
        raise WorkError(f"unknown keys for a Kubernetes job: {', '.join(unknown)}")
    image = work.get("image")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() or c == "\x00" for c in image):
        raise WorkError('a Kubernetes job needs "image": a container image')
    out: dict = {"image": image}
    for key in ("command", "args"):
        value = work.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) and not _has_nul(v) for v in value):
            raise WorkError(f'"{key}" must be a list of strings')
        out[key] = value
    env = work.get("env")
    if env is not None:
        # Kubernetes takes strings; numbers and booleans are written as they read ("3", "true").
        scalar = (str, int, float, bool)
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and k and not _has_nul(k) and isinstance(v, scalar) and not _has_nul(v)
            for k, v in env.items()
        ):
            raise WorkError('"env" must map names to string values')
        out["env"] = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in env.items()}
    return out
