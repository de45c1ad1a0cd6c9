"""The Kubernetes target: node labels, Kueue objects and the tenancy objects by server-side apply (field
manager `rackplane`, validated against the real schemas, pruned, dry-run), and jobs as ComputeDomain +
Indexed Job."""

import yaml
from django.utils.translation import gettext_noop

from core.workloads import WorkRule
from integrations import fields as f
from integrations.jobs import DispatchRequest
from integrations.kubernetes import versions as kubernetes_versions
from integrations.kubernetes import work
from integrations.kubernetes.adapter import KubernetesAdapter
from integrations.kubernetes.changes import FORCE_CONFLICTS_LABEL
from integrations.kubernetes.drain import KubernetesDrainer
from integrations.kubernetes.job_objects import render_job_objects
from integrations.kubernetes.jobs import backend_from_settings
from integrations.kubernetes.logs import read_logs
from integrations.registry import Kind, Setting, register


def clean(values: dict, errors: dict) -> dict:
    """api_url, token (stored as is, never shown), ca_file (the cluster CA) or insecure, dry_run
    (server-side dry run only: validates everything, changes nothing), force_conflicts (take over fields
    another field manager set, instead of failing the push with a conflict)."""
    out: dict = {"api_url": f.text(values["api_url"], "api_url", errors)}
    if not out["api_url"]:
        errors["api_url"] = "is required (https://api.cluster.example:6443)"
    else:
        out["api_url"] = f.url(out["api_url"], "api_url", errors)
    out["token"] = f.text(values["token"], "token", errors)
    out["ca_file"] = f.text(values["ca_file"], "ca_file", errors)
    out["insecure"] = f.flag(values["insecure"], "insecure", errors)
    out["dry_run"] = f.flag(values["dry_run"], "dry_run", errors)
    out["force_conflicts"] = f.flag(values["force_conflicts"], "force_conflicts", errors)
    f.absolute_path(
        out["ca_file"], "ca_file", errors, "must be an absolute path to the cluster's CA certificate (PEM)"
    )
    if out["ca_file"] and out["insecure"]:
        errors["insecure"] = "give a CA file or skip verification (insecure), not both"
    if out["api_url"].startswith("https://") and not out["ca_file"] and not out["insecure"]:
        errors["ca_file"] = "an https API server needs its CA file (or insecure, for testing only)"
    return out


def describe(payload: dict) -> list[str]:
    kinds: dict[str, int] = {}
    for obj in payload.get("objects") or []:
        kinds[obj.get("kind", "?")] = kinds.get(obj.get("kind", "?"), 0) + 1
    return [f"{count:,} {kind}" for kind, count in kinds.items()]


def render_job(request: DispatchRequest) -> str:
    return yaml.safe_dump_all(render_job_objects(request), sort_keys=False)


KIND = register(
    Kind(
        name="kubernetes",
        label=gettext_noop("Kubernetes API server"),
        short_label="Kubernetes",
        settings=(
            Setting(
                "api_url",
                "",
                f.text_field(
                    gettext_noop("API server URL"), gettext_noop("https://api.cluster.example:6443")
                ),
            ),
            Setting(
                "token", "", f.token_field(gettext_noop("Bearer token")), secret=True, form_name="k8s_token"
            ),
            Setting(
                "ca_file",
                "",
                f.text_field(
                    gettext_noop("CA file"),
                    gettext_noop("Absolute path of the cluster CA certificate (PEM)."),
                ),
            ),
            Setting(
                "insecure",
                False,
                f.flag_field(gettext_noop("Skip TLS verification"), gettext_noop("For testing only.")),
            ),
            Setting(
                "dry_run",
                False,
                f.flag_field(
                    gettext_noop("Server-side dry run only"),
                    gettext_noop("Validates everything on the API server, changes nothing."),
                ),
            ),
            Setting(
                "force_conflicts",
                False,
                f.flag_field(
                    FORCE_CONFLICTS_LABEL,
                    gettext_noop(
                        "When another tool (another field manager) set a field Rackplane sets to another "
                        "value, Rackplane takes the field over instead of failing the push with a conflict."
                    ),
                ),
            ),
        ),
        clean=clean,
        adapter=KubernetesAdapter,
        payload=lambda rendered, values: {"objects": rendered.objects()},
        # A slice: the racks' nodes (one server-side apply each, when their labels differ) and flavors.
        scoped_payload=lambda rendered, values: {"objects": rendered.slice_kubernetes_objects()},
        summary=lambda values: (
            f"{values.get('api_url')}"
            + (" (dry run only)" if values.get("dry_run") else "")
            + (" (takes over fields other tools set)" if values.get("force_conflicts") else "")
        ),
        what_to_do="check the Kubernetes target's API URL, token and CA, fix the cause and retry the push",
        atomic=False,
        backend="kubernetes",
        job_backend=backend_from_settings,
        render_job=render_job,
        job_file_suffix=".yaml",
        work=WorkRule(
            "kubernetes", work.validate_work, schema=work.SCHEMA, example=work.EXAMPLE, form=work.FORM
        ),
        read_logs=read_logs,
        drainer=KubernetesDrainer,
        describe=describe,
        order=30,
        version_facts=kubernetes_versions.VERSION_FACTS,
        uses=kubernetes_versions.uses,
        removals=kubernetes_versions.REMOVALS,
    )
)
