"""A kind of configuration target is one folder plus one registration (integrations.registry).

A throwaway kind, "echo", registered here and nowhere else, appears in the target form, the push pipeline,
the API and the admin. The directory target is exactly such a folder: nothing outside it imports it or
switches on its name, and no other kind's name is switched on outside its own folder either.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from importlib import import_module
from pathlib import Path

import grimp
import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token

from core.access import Role
from core.errors import ExternalError
from core.workloads import work_rules
from integrations import fields as f
from integrations import push_runs, pushes, registry
from integrations import state as configstate
from integrations.directory.adapter import DirectoryAdapter
from integrations.kinds import KIND_MODULES
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.registry import MASK, Kind, Setting
from tenancy.models import Department, Membership
from tenancy.services import save_department
from tests.python_source import parse

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "echo-password-never-shown"
ECHO_WHAT_TO_DO = "ask the echo to listen again, then retry the push"


# --- the throwaway kind -----------------------------------------------------------------------------


@dataclasses.dataclass
class Echo:
    """What the echo adapter was sent, and the error it raises instead (when set)."""

    kind: Kind | None = None
    sent: list[dict] = dataclasses.field(default_factory=list)
    error: Exception | None = None


class EchoAdapter:
    def __init__(self, echo: Echo, target: ConfigTarget, values: dict):
        self.echo, self.target, self.values = echo, target, values

    def apply(self, payload: dict, log, push) -> str:
        if self.echo.error is not None:
            raise self.echo.error
        self.echo.sent.append(payload)
        log(f"{self.target.name} says {payload['greeting']!r}")
        return f"echoed {len(payload['files'])} file names"

    def diff(self, payload: dict) -> list[str]:
        return []


def clean_echo(values: dict, errors: dict) -> dict:
    greeting = f.text(values["greeting"], "greeting", errors)
    if "!" in greeting:
        errors["greeting"] = "an echo repeats calmly: no exclamation marks"
    return {"greeting": greeting, "password": f.text(values["password"], "password", errors)}


@pytest.fixture
def echo():
    recorder = Echo()
    recorder.kind = registry.register(
        Kind(
            name="echo",
            label="Echo (test)",
            settings=(
                Setting("greeting", "hello", f.text_field("Greeting"), form_name="echo_greeting"),
                Setting(
                    "password", "", f.token_field("Echo password"), secret=True, form_name="echo_password"
                ),
            ),
            clean=clean_echo,
            adapter=lambda target, values: EchoAdapter(recorder, target, values),
            payload=lambda rendered, values: {
                "greeting": values["greeting"],
                "files": sorted(rendered.files()),
            },
            summary=lambda values: f"says {values['greeting']!r} (password {values['password'] or 'none'})",
            what_to_do=ECHO_WHAT_TO_DO,
            atomic=False,
            describe=lambda payload: [f"{payload['greeting']!r} and {len(payload['files'])} file names"],
        )
    )
    yield recorder
    registry.unregister("echo")


@pytest.fixture
def echo_target(echo, db) -> ConfigTarget:
    target = ConfigTarget(name="echo-1", kind="echo", settings={"greeting": "hi", "password": PASSWORD})
    target.full_clean()
    target.save()
    return target


def push_now(django_capture_on_commit_callbacks, target: ConfigTarget) -> ConfigPush:
    with django_capture_on_commit_callbacks(execute=True):
        [push] = pushes.queue_pushes(reason="echo test", targets=[target])
    push.refresh_from_db()
    return push


# --- registration ----------------------------------------------------------------------------------


def test_a_name_or_a_form_field_registered_twice_is_refused(echo):
    assert registry.register(echo.kind) is echo.kind  # the same kind again (its module imported twice)
    with pytest.raises(ValueError, match="'echo' is registered already"):
        registry.register(dataclasses.replace(echo.kind, label="Another echo"))
    clashing = dataclasses.replace(
        echo.kind, name="echo2", settings=(Setting("dir", "", f.text_field("Dir"), form_name="config_dir"),)
    )
    with pytest.raises(ValueError, match=r"used by another kind: \['config_dir'\]"):
        registry.register(clashing)
    assert not registry.is_kind("echo2")
    assert registry.get("echo") is echo.kind


# --- the target form -------------------------------------------------------------------------------


def test_the_target_form_shows_the_kinds_fields(echo, admin_client_logged_in):
    create = reverse("integrations:target-create")

    partial = admin_client_logged_in.get(create, {"kind": "echo"}, HTTP_HX_REQUEST="true").content.decode()
    assert 'name="echo_greeting"' in partial and 'name="echo_password"' in partial
    assert 'name="config_dir"' not in partial and "<html" not in partial

    page = admin_client_logged_in.get(create, {"kind": "echo"}).content.decode()
    assert "<html" in page and '<option value="echo" selected>Echo (test)</option>' in page
    assert 'name="echo_greeting"' in page and 'name="echo_password"' in page


def test_the_target_form_validates_with_the_kind_and_keeps_the_secret(echo, admin_client_logged_in):
    create = reverse("integrations:target-create")
    fields = {"name": "echo-1", "kind": "echo", "enabled": "on", "echo_password": PASSWORD}

    loud = admin_client_logged_in.post(create, {**fields, "echo_greeting": "hi!"})
    assert loud.status_code == 400  # refused, nothing saved
    assert loud.context["form"].errors["echo_greeting"] == ["an echo repeats calmly: no exclamation marks"]
    assert not ConfigTarget.objects.filter(name="echo-1").exists()

    assert admin_client_logged_in.post(create, {**fields, "echo_greeting": "hi"}).status_code == 302
    target = ConfigTarget.objects.get(name="echo-1")
    assert (target.kind, target.settings) == ("echo", {"greeting": "hi", "password": PASSWORD})

    edit = reverse("integrations:target-edit", args=[target.pk])
    page = admin_client_logged_in.get(edit).content.decode()
    assert PASSWORD not in page and "A token is stored" in page and 'value="hi"' in page
    listing = admin_client_logged_in.get(reverse("integrations:target-list")).content.decode()
    assert "Kinds of target: Directory (rendered files), Slurm controller" in listing
    assert ", Echo (test)." in listing and f"says &#x27;hi&#x27; (password {MASK})" in listing
    assert PASSWORD not in listing

    # Left empty on edit, the secret is kept.
    edited = {**fields, "echo_password": "", "echo_greeting": "hello again"}
    assert admin_client_logged_in.post(edit, edited).status_code == 302
    target.refresh_from_db()
    assert target.settings == {"greeting": "hello again", "password": PASSWORD}


# --- the push pipeline -----------------------------------------------------------------------------


def test_a_push_sends_the_kinds_payload_to_its_adapter(
    echo, echo_target, demo_inventory, admin_client_logged_in, django_capture_on_commit_callbacks
):
    push = push_now(django_capture_on_commit_callbacks, echo_target)

    files = sorted(configstate.render_current())
    assert "slurm/topology.conf" in files
    assert push.payload == {"greeting": "hi", "files": files}
    assert push.payload_hash == pushes.payload_hash(push.payload)
    assert echo.sent == [push.payload]
    assert push.status == PushStatus.SUCCEEDED
    assert "pushing to echo target echo-1" in push.log and "echo-1 says 'hi'" in push.log
    assert f"succeeded: echoed {len(files)} file names" in push.log
    assert PASSWORD not in push.log

    page = admin_client_logged_in.get(reverse("integrations:push-detail", args=[push.pk])).content.decode()
    assert f"&#x27;hi&#x27; and {len(files)} file names" in page  # the kind's describe
    assert "Echo (test)" in page


def test_a_transient_error_leaves_the_push_queued_for_a_retry(
    echo, echo_target, demo_inventory, django_capture_on_commit_callbacks
):
    echo.error = ExternalError("the echo did not answer", transient=True)

    push = push_now(django_capture_on_commit_callbacks, echo_target)

    assert (push.status, push.attempts) == (PushStatus.QUEUED, 1)
    assert push.next_attempt_at is not None
    assert "the echo did not answer" in push.error and "retrying" in push.error
    assert echo.sent == []

    echo.error = None
    ConfigPush.objects.filter(pk=push.pk).update(next_attempt_at=push.created_at)
    assert push_runs.execute(push.pk).status == PushStatus.SUCCEEDED
    assert len(echo.sent) == 1


def test_a_permanent_error_fails_the_push_with_the_kinds_advice(
    echo, echo_target, demo_inventory, admin_client_logged_in, django_capture_on_commit_callbacks
):
    echo.error = ExternalError("the echo refused to repeat that")

    push = push_now(django_capture_on_commit_callbacks, echo_target)

    assert (push.status, push.attempts) == (PushStatus.FAILED, 1)
    assert "the echo refused to repeat that" in push.error
    assert pushes.what_to_do(push.error) == ECHO_WHAT_TO_DO
    url = reverse("integrations:push-detail", args=[push.pk])
    page = admin_client_logged_in.get(url).content.decode()
    assert f"What to do next:</b> {ECHO_WHAT_TO_DO}" in page
    # The kind says whether a failure can leave the target half changed (echo: atomic=False).
    assert "What was done before the failure stays on the target" in page
    registry.unregister("echo")
    registry.register(dataclasses.replace(echo.kind, atomic=True))
    page = admin_client_logged_in.get(url).content.decode()
    assert "The target keeps its previous configuration." in page
    assert "What was done before the failure" not in page


# --- the API and the admin -------------------------------------------------------------------------


@pytest.fixture
def member(django_user_model, demo_inventory):
    user = django_user_model.objects.create_user("member", "member@example.com", "member-password-1")
    department = save_department(Department(name="Alpha", slug="alpha", guaranteed_gpus=8))
    Membership.objects.create(user=user, department=department, role=Role.MEMBER)
    return user


def token_client(api_client, user):
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return api_client


def test_the_api_lists_the_target_masked_and_the_kind_with_its_settings(echo_target, api_client, admin_user):
    api = token_client(api_client, admin_user)

    targets = api.get("/api/v1/config-targets/")
    assert targets.status_code == 200
    [row] = [t for t in targets.json()["results"] if t["kind"] == "echo"]
    assert row["name"] == "echo-1" and row["kind_label"] == "Echo (test)"
    assert row["settings"] == {"greeting": "hi", "password": MASK}
    assert row["summary"] == f"says 'hi' (password {MASK})"
    assert PASSWORD not in targets.content.decode()

    kinds = api.get("/api/v1/config-targets/kinds/")
    assert kinds.status_code == 200
    [kind] = [k for k in kinds.json() if k["name"] == "echo"]
    assert kind == {
        "name": "echo",
        "label": "Echo (test)",
        "runs_jobs": "",
        "settings": [
            {"key": "greeting", "label": "Greeting", "default": "hello", "secret": False},
            {"key": "password", "label": "Echo password", "default": "", "secret": True},
        ],
    }


def test_the_api_is_for_platform_admins_only(echo_target, api_client, member):
    api = token_client(api_client, member)
    assert api.get("/api/v1/config-targets/").status_code == 403
    assert api.get("/api/v1/config-targets/kinds/").status_code == 403


def test_the_admin_lists_the_target_with_its_secret_masked(echo_target, admin_client_logged_in):
    listing = admin_client_logged_in.get("/admin/integrations/configtarget/")
    assert listing.status_code == 200
    assert "echo-1" in listing.content.decode()
    change = admin_client_logged_in.get(f"/admin/integrations/configtarget/{echo_target.pk}/change/")
    assert change.status_code == 200
    assert MASK in change.content.decode() and PASSWORD not in change.content.decode()


# --- the directory target is exactly one folder plus one registration --------------------------------


def switch_pattern(name: str) -> re.Pattern:
    """A comparison or lookup of a target's kind against `name`: `kind == "slurm"`, `filter(kind="slurm")`,
    `kind__in=["slurm", ...]`, `{% if target.kind == "slurm" %}`, `kind in ("slurm", ...)`."""
    operator = r"(?:==|!=|=|(?:not\s+)?in)"
    return re.compile(
        r"\bkind(?:__in|__exact)?\s*" + operator + r"\s*[(\[{]?[^\n)\]}]*[\"']" + re.escape(name) + r"[\"']"
    )


def kind_folders() -> dict[str, Path]:
    """Each registered kind's name and its folder, from integrations.kinds.KIND_MODULES."""
    out = {}
    for module_name in KIND_MODULES:
        module = import_module(module_name)
        out[module.KIND.name] = Path(module.__file__).resolve().parent
    return out


def source_files():
    for top in ("core", "inventory", "tenancy", "scheduling", "integrations", "portal", "templates"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".html") and "migrations" not in path.parts:
                yield path


def test_the_switch_pattern_finds_what_it_is_for():
    pattern = switch_pattern("fabric")
    for line in [
        '{% if push.target.kind == "kubernetes" or push.target.kind == "fabric" %}',
        'ConfigTarget.objects.filter(kind="fabric")',
        "if target.kind in ('slurm', 'fabric'):",
        'kind__in=["fabric"]',
    ]:
        assert pattern.search(line), line
    assert not pattern.search('Job.objects.filter(backend="fabric")')


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_nothing_outside_a_kinds_folder_switches_on_its_name():
    folders = kind_folders()
    assert set(folders) == {"directory", "slurm", "kubernetes", "fabric"}
    found = []
    for path in source_files():
        text = path.read_text()
        for name, folder in folders.items():
            if folder in path.parents:
                continue
            for match in switch_pattern(name).finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)}")
    assert found == []


def test_the_directory_target_is_one_folder_and_one_registration():
    folder = ROOT / "integrations" / "directory"
    assert kind_folders()["directory"] == folder
    assert KIND_MODULES.count("integrations.directory.kind") == 1
    kind = registry.get("directory")
    assert kind.adapter is DirectoryAdapter
    # Nothing outside the folder imports it: integrations.kinds loads it by name, at start-up.
    graph = grimp.build_graph("core", "inventory", "tenancy", "scheduling", "integrations", "portal")
    inside = {
        m for m in graph.modules if m == "integrations.directory" or m.startswith("integrations.directory.")
    }
    importers = {
        importer
        for module in inside
        for importer in graph.find_modules_that_directly_import(module)
        if importer not in inside
    }
    assert importers == set()


# --- job-running kinds: one entry each, every capability, nothing else switches on their names ----------


def test_every_job_running_kind_provides_every_capability():
    job_kinds = registry.job_kinds()
    assert {kind.name: kind.backend for kind in job_kinds} == {"slurm": "slurm", "kubernetes": "kubernetes"}
    for kind in job_kinds:
        missing = [name for name in registry.JOB_CAPABILITIES if getattr(kind, name) is None]
        assert missing == [], f"{kind.name} lacks {missing}"
        assert kind.work.backend == kind.backend
        assert registry.job_kind(kind.backend) is kind
    # What the layers below integrations ask (core.workloads) is exactly what the kinds registered.
    assert {rule.backend: rule for rule in work_rules()} == {kind.backend: kind.work for kind in job_kinds}
    # The tray drainers are the job-running kinds' own (integrations.drain asks the registry).
    assert registry.drainer_kinds() == [kind.name for kind in job_kinds]


def test_backend_choices_in_the_job_form_and_api_are_the_registrys():
    from scheduling.api.serializers import JobSubmitSerializer
    from scheduling.filters import JobFilter

    expected = registry.backend_choices()
    assert expected == [("slurm", "Slurm"), ("kubernetes", "Kubernetes")]
    api = JobSubmitSerializer().fields["backend"]
    assert sorted(api.choices.items()) == sorted(expected)
    assert api.default in registry.backends()
    listing = JobFilter().filters["backend"].extra["choices"]
    assert sorted(listing) == sorted(expected)
    # The job form's work sections: one per backend whose rule is registered.
    assert sorted(rule.backend for rule in work_rules()) == sorted(registry.backends())


# Modules that still compare a job's backend to a literal kind name, each with what is left to do. The
# list may only shrink: a file named here that no longer switches fails the test below too.
STILL_SWITCHING: set[str] = set()


def job_kind_names() -> set[str]:
    """The job-running kinds' names and backends (every kind's name: the regex test above)."""
    return {kind.name for kind in registry.job_kinds()} | set(registry.backends())


def literal_kind_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines of `x == "slurm"`, `x != "kubernetes"`, `x in ("slurm", ...)`, `"slurm" in x` and the same
    with `Backend.SLURM`/`Backend.KUBERNETES` (scheduling.choices: the enum's members are kind names)."""

    def is_name(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value in names
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id == "Backend" and node.attr.lower() in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(is_name(element) for element in node.elts)
        return False

    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops)
        and any(is_name(side) for side in (node.left, *node.comparators))
    )


def test_literal_kind_comparisons_are_found():
    names = {"slurm", "kubernetes"}
    source = """
if job.backend == "slurm": pass
if backend != Backend.KUBERNETES: pass
x = [b for b in backends if b not in ("slurm", "kubernetes")]
y = "slurm" in backends
z = kind == "gpu" or key in ("slots", "name")
"""
    assert literal_kind_comparisons(parse(source), names) == [2, 3, 4, 5]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_nothing_outside_a_kinds_folder_and_the_registry_compares_a_kind_to_its_name():
    names = job_kind_names()
    folders = set(kind_folders().values())
    allowed = {ROOT / "integrations" / "registry.py", ROOT / "integrations" / "kinds.py"}
    found, still = [], set()
    for path in source_files():
        if path.suffix != ".py" or path in allowed or any(folder in path.parents for folder in folders):
            continue
        lines = literal_kind_comparisons(parse(path), names)
        relative = str(path.relative_to(ROOT))
        if relative in STILL_SWITCHING:
            if lines:
                still.add(relative)
            continue
        found += [f"{relative}:{line}" for line in lines]
    assert found == []
    assert still == STILL_SWITCHING  # a file that stopped switching leaves the list
