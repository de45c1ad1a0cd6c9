"""The Slurm target: topology.conf (or topology.yaml) and rackplane.conf pushed to slurmctld (atomic,
reconfigure, read back, rolled back on failure), department QOS, accounts and who may submit through
slurmrestd's slurmdb endpoints (integrations.slurm.accounting; without slurmrestd sacctmgr sets the QOS
alone), and jobs through slurmrestd."""

import json
import re

from django.utils.translation import gettext_noop

from core.workloads import WorkRule
from integrations import fields as f
from integrations.jobs import DispatchRequest
from integrations.registry import Kind, Setting, register
from integrations.slurm import versions as slurm_versions
from integrations.slurm import work
from integrations.slurm.adapter import SlurmAdapter, remembering
from integrations.slurm.drain import SlurmDrainer
from integrations.slurm.jobs import SlurmJobBackend, backend_from_settings
from integrations.slurm.logs import slurm_logs
from integrations.slurm.rest import submit_payload

USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
NODE_OVERRIDES = ("cpus", "memory_mb", "node_hostname", "node_address", "node_port_base")


def clean(values: dict, errors: dict) -> dict:
    """config_dir (absolute: the directory slurmctld reads), scontrol (a path, command line or argv prefix),
    slurmctld_log (optional, to quote slurmctld's reason for refusing), topology_format (conf: Slurm 24.11
    topology.conf, the NVLink blocks alone; yaml: Slurm 25.05+ topology.yaml, the blocks and the compute
    fabric's tree), how slurmd is reached when not at the node's own name (cpus, memory_mb, node_hostname,
    node_address, node_port_base: node i listens on base + i). Running jobs: rest_url (slurmrestd; empty:
    this target does not run jobs), rest_user (SlurmUser, or root: the user the tokens are for; each job is
    submitted, read and cancelled as its person, X-SLURM-USER-NAME, which only SlurmUser's or root's token
    may name), jwt_key_file (slurmctld's jwt_key: short-lived tokens are minted from it, the way to run
    every person's jobs) or rest_token (a static JWT from `scontrol token`, never shown: it is rest_user's
    alone and cannot act as anyone else, so only rest_user's own jobs run and every other person's is
    refused at dispatch with that reason), accounting (department as account and QOS: needs slurmdbd),
    imex (slurmctld runs SwitchType=switch/nvidia_imex)."""
    out: dict = {}
    for key in ("config_dir", "scontrol", "slurmctld_log", "node_hostname", "node_address"):
        out[key] = f.text(values[key], key, errors)
    if not out["config_dir"]:
        errors["config_dir"] = "is required: the directory that holds slurmctld's slurm.conf"
    else:
        f.absolute_path(out["config_dir"], "config_dir", errors)
    f.absolute_path(out["slurmctld_log"], "slurmctld_log", errors)
    out["scontrol"] = out["scontrol"] or "scontrol"
    out["topology_format"] = f.text(values["topology_format"], "topology_format", errors) or "conf"
    if out["topology_format"] not in ("conf", "yaml"):
        errors["topology_format"] = "must be conf or yaml"
    out["cpus"] = f.integer(values["cpus"], "cpus", errors, 1, 100_000)
    out["memory_mb"] = f.integer(values["memory_mb"], "memory_mb", errors, 1)
    out["node_port_base"] = f.integer(values["node_port_base"], "node_port_base", errors, 1, 65535)
    for key in ("node_hostname", "node_address"):
        if out[key] and not f.HOST_RE.match(out[key]):
            errors[key] = "must be a host name or an IP address"
    for key in ("rest_url", "rest_user", "rest_token", "jwt_key_file"):
        out[key] = f.text(values[key], key, errors)
    if out["rest_url"]:
        out["rest_url"] = f.url(out["rest_url"], "rest_url", errors)
    if out["rest_user"] and not USER_RE.match(out["rest_user"]):
        errors["rest_user"] = "must be a user name (letters, digits, _ . @ -)"
    elif out["rest_url"] and not out["rest_user"]:
        errors["rest_user"] = (
            "is required with rest_url: SlurmUser (or root), whose tokens submit each job as its person"
        )
    f.absolute_path(out["jwt_key_file"], "jwt_key_file", errors)
    if out["rest_token"] and out["jwt_key_file"]:
        errors["rest_token"] = "give a token or a jwt_key_file, not both"
    elif out["rest_url"] and not out["rest_token"] and not out["jwt_key_file"]:
        errors["jwt_key_file"] = (
            "slurmrestd needs a JWT: give slurmctld's jwt_key file (jobs then run as their people) or a "
            "rest_token (only rest_user's own jobs can run with one)"
        )
    out["accounting"] = f.flag(values["accounting"], "accounting", errors)
    out["imex"] = f.flag(values["imex"], "imex", errors)
    return out


def payload(rendered, values: dict) -> dict:  # rendered: integrations.pushes.Rendered
    overrides = {key: values.get(key) for key in NODE_OVERRIDES}
    overrides["node_hostname"] = overrides["node_hostname"] or ""
    overrides["node_address"] = overrides["node_address"] or ""
    overrides["topology_format"] = values.get("topology_format") or "conf"
    state = rendered.state
    return {
        "files": rendered.slurm(overrides),
        "qos": [
            {"name": q.name, "gpu_limit": q.gpu_limit, "mig_limits": [list(m) for m in q.mig_limits]}
            for q in state.qos
        ],
        # slurmdbd's account tree and who may submit where (integrations.slurm.accounting).
        "accounts": [
            {
                "name": a.name,
                "parent": a.parent,
                "gpu_limit": a.gpu_limit,
                "qos": list(a.qos),
                "shares": a.shares,
                "mig_limits": [list(m) for m in a.mig_limits],
            }
            for a in rendered.slurm_accounts()
        ],
        "associations": [{"account": a.account, "user": a.user} for a in state.associations],
    }


def job_backend(values: dict) -> SlurmJobBackend | None:
    """The slurmrestd job backend of a target that has one (rest_url), else None. It speaks the API version
    the target remembers, and has the target remember the one it chooses when it must choose."""
    if not (values.get("rest_url") or "").strip():
        return None
    return backend_from_settings(values, on_api_version=remembering(values))


def render_job(request: DispatchRequest) -> str:
    """The slurmrestd request: its body, and under "headers" the user it is sent as (the job's person; the
    token, minted at send time, is never written)."""
    rendered = submit_payload(request)
    if request.run_as is not None:
        person = request.run_as
        rendered["headers"] = {"X-SLURM-USER-NAME": person.name}
        rendered["run_as"] = {
            "name": person.name,
            "uid": person.uid,
            "gid": person.gid,
            "groups": list(person.groups),
        }
    return json.dumps(rendered, indent=2, sort_keys=True) + "\n"


KIND = register(
    Kind(
        name="slurm",
        label=gettext_noop("Slurm controller"),
        short_label="Slurm",
        settings=(
            Setting(
                "config_dir",
                "",
                f.text_field(
                    gettext_noop("Config directory"),
                    gettext_noop("The directory slurmctld reads (holds slurm.conf), absolute."),
                ),
            ),
            Setting(
                "scontrol",
                "scontrol",
                f.text_field(
                    gettext_noop("scontrol"),
                    gettext_noop("Path or command line; default: scontrol on the PATH."),
                ),
            ),
            Setting(
                "slurmctld_log",
                "",
                f.text_field(
                    gettext_noop("slurmctld log"),
                    gettext_noop("Optional: quoted when slurmctld refuses a configuration."),
                ),
            ),
            Setting(
                "topology_format",
                "conf",
                f.choice_field(
                    gettext_noop("Topology file"),
                    [
                        ("conf", gettext_noop("topology.conf (Slurm 24.11)")),
                        ("yaml", gettext_noop("topology.yaml (Slurm 25.05+)")),
                    ],
                    "conf",
                ),
            ),
            Setting(
                "cpus",
                None,
                f.number_field(gettext_noop("CPUs per node"), gettext_noop("Default 144 (two Grace CPUs).")),
            ),
            Setting(
                "memory_mb",
                None,
                f.number_field(
                    gettext_noop("Memory per node (MB)"), gettext_noop("Empty: what slurmd reports.")
                ),
            ),
            Setting(
                "node_hostname",
                "",
                f.text_field(
                    gettext_noop("slurmd host name"),
                    gettext_noop("Only when slurmd does not run at the node's own name."),
                ),
            ),
            Setting(
                "node_address",
                "",
                f.text_field(
                    gettext_noop("slurmd address"),
                    gettext_noop("Only when slurmd is reached at another address."),
                ),
            ),
            Setting(
                "node_port_base",
                None,
                f.number_field(
                    gettext_noop("slurmd port base"),
                    gettext_noop("Several slurmd on one host: node i listens on base + i."),
                ),
            ),
            Setting(
                "rest_url",
                "",
                f.text_field(
                    gettext_noop("slurmrestd URL"),
                    gettext_noop("Where jobs are submitted (http://slurm-ctl:6820). Empty: no jobs here."),
                ),
            ),
            Setting(
                "rest_user",
                "",
                f.text_field(
                    gettext_noop("SlurmUser for tokens"),
                    gettext_noop(
                        "SlurmUser (or root): tokens are minted for it, and each job is submitted, read and "
                        "cancelled as its person (X-SLURM-USER-NAME). Never a person's account."
                    ),
                ),
            ),
            Setting(
                "rest_token",
                "",
                f.token_field(gettext_noop("slurmrestd token (scontrol token): cannot act as other users")),
                secret=True,
            ),
            Setting(
                "jwt_key_file",
                "",
                f.text_field(
                    gettext_noop("JWT key file"),
                    gettext_noop(
                        "slurmctld's jwt_key (absolute path): short tokens of rest_user are minted from it, "
                        "so each job runs as its person. The key itself is never sent."
                    ),
                ),
            ),
            Setting(
                "accounting",
                False,
                f.flag_field(
                    gettext_noop("Account and QOS per department"),
                    gettext_noop("Needs slurmdbd with the department accounts."),
                ),
            ),
            Setting(
                "imex",
                False,
                f.flag_field(
                    gettext_noop("Per-job IMEX channels"),
                    gettext_noop("slurmctld runs SwitchType=switch/nvidia_imex."),
                ),
            ),
        ),
        clean=clean,
        adapter=SlurmAdapter,
        payload=payload,
        summary=lambda values: f"{values.get('config_dir')} via {values.get('scontrol')}",
        what_to_do=(
            "check the Slurm target's settings and slurmctld's log, fix the cause and retry the push; "
            "slurmctld keeps running the previous configuration"
        ),
        backend="slurm",
        job_backend=job_backend,
        render_job=render_job,
        job_file_suffix=".json",
        job_qos=True,
        work=WorkRule("slurm", work.validate_work, schema=work.SCHEMA, example=work.EXAMPLE, form=work.FORM),
        read_logs=slurm_logs,
        drainer=SlurmDrainer,
        order=20,
        version_facts=slurm_versions.VERSION_FACTS,
        uses=slurm_versions.uses,
        removals=slurm_versions.REMOVALS,
    )
)
