"""The one rule for a Kubernetes job's work: {"image", "command", "args", "env"}."""

from __future__ import annotations

from core.workloads import WorkError

WORK_KEYS = frozenset({"image", "command", "args", "env"})


def validate_work(work: dict) -> dict:
    unknown = sorted(set(work) - WORK_KEYS)
    if unknown:
        raise WorkError(f"unknown keys for a Kubernetes job: {', '.join(unknown)}")
    image = work.get("image")
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise WorkError('a Kubernetes job needs "image": a container image')
    out: dict = {"image": image}
    for key in ("command", "args"):
        value = work.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise WorkError(f'"{key}" must be a list of strings')
        out[key] = value
    env = work.get("env")
    if env is not None:
        # Kubernetes takes strings; numbers and booleans are written as they read ("3", "true").
        scalar = (str, int, float, bool)
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and k and isinstance(v, scalar) for k, v in env.items()
        ):
            raise WorkError('"env" must map names to string values')
        out["env"] = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in env.items()}
    return out
