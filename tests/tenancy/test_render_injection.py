"""Free text that reaches a rendered file is refused at save, or rendered as one entry with the value intact.

Tenant isolation: a department export path with a newline, a '..' or a `*(rw)` clause was saved
and written into /etc/exports. Each rendered format is parsed back here with a parser of its own grammar:
exports(5) lines (a strict parser below: one line per export, path, whitespace, client(options)),
slurm.conf lines (key=value tokens; the renderer module's own parse_conf_lines and python-hostlist), and
Kubernetes YAML (PyYAML's safe_load_all: one document per object, equal to the object rendered).
docs/rendering.md lists which field reaches which file.
"""

from __future__ import annotations

import re
import string

import pytest
import yaml
from django.core.exceptions import ValidationError
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from integrations.kubernetes import tenants as k
from integrations.slurm.render import ServiceTier, SlurmNode, parse_conf_lines, render_rackplane_conf
from integrations.slurm.topology import expand
from integrations.state import render_current
from tenancy import renderers as r
from tenancy.models import Department, TenancySettings
from tenancy.renderers import TenantSpec, export_path_problem
from tenancy.services import save_department
from tenancy.validators import validate_export_path
from tests.factories import make_department, token_client
from tests.forms import department_form

# --- parsers of the consumers' formats ----------------------------------------------------------------

# exports(5): `<path> <client>(<options>)` per line; whitespace ends the path, a client is immediately
# followed by its option list. '#' starts a comment, '"' quotes, '\' escapes: none may be in an entry.
_EXPORT_ENTRY = re.compile(r"(?P<path>/[^\s]*)[ \t]+(?P<client>[^\s()]+)\((?P<options>[^\s()]*)\)")


def parse_exports(text: str) -> list[tuple[str, str, list[str]]]:
    """The (path, client, options) of each line, failing on anything exportfs would read otherwise."""
    assert text == "" or text.endswith("\n"), "the file ends with a newline"
    entries = []
    for line in text.split("\n")[:-1]:
        match = _EXPORT_ENTRY.fullmatch(line)
        assert match, f"not one exports(5) entry: {line!r}"
        assert not set(line) & set('#"\\'), f"comment, quote or escape in {line!r}"
        entries.append((match["path"], match["client"], match["options"].split(",")))
    return entries


def slurm_lines(text: str) -> list[list[tuple[str, str]]]:
    """slurm.conf: every line a comment or key=value tokens separated by spaces."""
    parsed = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        tokens = line.split(" ")
        pairs = [tuple(token.split("=", 1)) for token in tokens]
        assert all(len(p) == 2 and p[0].isalpha() and p[1] for p in pairs), f"not key=value tokens: {line!r}"
        parsed.append(pairs)
    return parsed


# --- strategies ---------------------------------------------------------------------------------------

# Text that looks like a path often enough to be accepted, with every character exports(5) reads
# specially, whitespace, line breaks and Unicode mixed in.
_PATH_CHARS = st.sampled_from(
    list(string.ascii_letters + string.digits + "._-/")
    + list(" \t\n\r\x0b\x0c\x00\x85\u2028\u202e*?(),#\"\\@:;=$'é")
)
_path_text = st.text(_PATH_CHARS, max_size=40)
export_paths = st.one_of(
    st.text(max_size=60),
    _path_text,
    st.builds(lambda tail: "/exports/tenants/" + tail, _path_text),
    st.builds(lambda tail: "/exports/tenants/" + tail, st.from_regex(r"[a-z0-9._-]{1,12}", fullmatch=True)),
)
free_text = st.one_of(st.text(max_size=40), st.text(st.sampled_from("ab-_.:=#, \n\r\t0[]()*"), max_size=20))


def tenant(slug: str = "research", **overrides) -> TenantSpec:
    fields = {
        "slug": slug,
        "name": "Research",
        "guaranteed_gpus": 8,
        "limit_gpus": None,
        "vlan_id": 100,
        "vxlan_vni": 10100,
        "pkey": 0x0100,
        "port_guids": (),
        "network_cidr": "10.64.0.0/24",
        "export_path": f"/exports/tenants/{slug}",
        "storage_quota_gib": 100,
    }
    return TenantSpec(**{**fields, **overrides})


# --- export paths: the reported cases -----------------------------------------------------------------

INJECTIONS = [
    ("/exports/tenants/a\n/ *(rw,no_root_squash)", "a line break"),
    ("/exports/tenants/a\n", "a line break"),
    ("/exports/tenants/../../etc", "'..'"),
    ("/exports/tenants/a/..", "'..'"),
    ("/exports/tenants/a *(rw)", "whitespace"),
    ("/exports/tenants/a*(rw)", "'*'"),
    ("/exports/tenants/a(rw)", "'('"),
    ("/exports/tenants/a,b", "','"),
    ("/exports/tenants/a#b", "'#'"),
    ('/exports/tenants/"a"', "'\"'"),
    ("/exports/tenants/a\\040b", "'\\\\'"),
    ("/exports/tenants/a\u202eb", "U+202E"),
    ("/exports/tenants//a", "'//'"),
    ("/exports/tenants/a/", "ends with '/'"),
    ("exports/tenants/a", "not absolute"),
    ("/exports/tenants/" + "a" * 240, "at most 255"),
]


@pytest.mark.parametrize(("path", "why"), INJECTIONS)
def test_the_renderer_refuses_an_injected_export_path_naming_the_department(path, why):
    with pytest.raises(ValueError, match=r"department 'research': export_path .*" + re.escape(why)):
        tenant(export_path=path)


@pytest.mark.parametrize(("path", "why"), INJECTIONS)
def test_the_model_refuses_an_injected_export_path(path, why):
    with pytest.raises(ValidationError) as excinfo:
        Department(export_path=path).clean_fields(
            exclude=[f.name for f in Department._meta.fields if f.name != "export_path"]
        )
    assert why in " ".join(excinfo.value.message_dict["export_path"])


@pytest.fixture
def research(demo_inventory):
    return make_department("Research", guaranteed_gpus=8)


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.django_db
@pytest.mark.parametrize(("path", "why"), INJECTIONS[:6])
def test_the_service_saves_nothing_and_names_the_field(research, path, why):
    with pytest.raises(ValidationError) as excinfo:
        save_department(Department(name="Vision", slug="vision", export_path=path))
    assert why in " ".join(excinfo.value.message_dict["export_path"])
    assert not Department.objects.filter(slug="vision").exists()


@pytest.mark.django_db
def test_the_api_refuses_an_injected_export_path_with_a_400_naming_the_field(research, platform_admin):
    api = token_client(platform_admin)
    body = {"name": "Vision", "slug": "vision", "export_path": "/exports/tenants/v\n/ *(rw,no_root_squash)"}
    response = api.post("/api/v1/departments/", body, format="json")
    assert response.status_code == 400, response.content
    assert "a line break" in str(response.json()["export_path"])
    response = api.patch(
        f"/api/v1/departments/{research.slug}/", {"export_path": "/exports/tenants/../.."}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "'..'" in str(response.json()["export_path"])
    assert list(Department.objects.values_list("export_path", flat=True)) == ["/exports/tenants/research"]


@pytest.mark.django_db
def test_the_department_form_shows_the_refusal_on_the_field(research, client, platform_admin):
    client.force_login(platform_admin)
    url = reverse("integrations:department-edit", args=[research.slug])
    form = department_form(name="Research", slug="research", guaranteed_gpus=8, export_path="/exports/x*(rw)")
    response = client.post(url, form)
    assert response.status_code == 200
    assert "'*' (a client wildcard in exports)" in " ".join(response.context["form"].errors["export_path"])
    research.refresh_from_db()
    assert research.export_path == "/exports/tenants/research"


# --- export paths: root and nesting -------------------------------------------------------------------


@pytest.mark.django_db
def test_an_export_outside_the_root_or_around_or_inside_another_is_refused(research):
    for path, message in (
        ("/etc", "is not inside the export root /exports/tenants"),
        ("/exports/tenants", "is not inside the export root"),  # the root itself holds every export
        ("/exports/tenants/research/vision", "lies inside Research's export /exports/tenants/research"),
    ):
        candidate = Department(name="Vision", slug="vision", export_path=path)
        with pytest.raises(ValidationError) as excinfo:
            candidate.clean()
        assert message in " ".join(excinfo.value.message_dict["export_path"]), path
        with pytest.raises(ValidationError) as excinfo:
            save_department(candidate)
        assert "export_path" in excinfo.value.message_dict
    assert not Department.objects.filter(slug="vision").exists()
    # Around another's export: caught by clean() itself (not only by the service's own overlap check).
    vision = make_department("Vision", export_path="/exports/tenants/vision/data")
    outer = Department(name="Outer", slug="outer", export_path="/exports/tenants/vision")
    with pytest.raises(ValidationError) as excinfo:
        outer.clean()
    assert "holds Vision's export /exports/tenants/vision/data" in str(excinfo.value)
    # A sibling sharing a prefix is not nesting.
    assert make_department("Research 2", slug="research2", export_path="/exports/tenants/research2")
    assert vision.pk


@pytest.mark.django_db
def test_the_export_root_may_not_strand_a_department_nor_be_malformed(research):
    pools = TenancySettings.load()
    pools.export_root = "/srv/tenants"
    with pytest.raises(ValidationError) as excinfo:
        pools.full_clean()
    assert "Research (/exports/tenants/research)" in " ".join(excinfo.value.message_dict["export_root"])
    pools.export_root = "/exports/tenants\n/ *(rw)"
    with pytest.raises(ValidationError) as excinfo:
        pools.full_clean()
    assert "a line break" in " ".join(excinfo.value.message_dict["export_root"])
    pools.export_root = "/"
    pools.full_clean()  # the whole server's tree holds every export
    pools.nfs_server = "nfs.example.org\nkind: Secret"
    with pytest.raises(ValidationError) as excinfo:
        pools.full_clean()
    assert "neither an IP address nor a DNS name" in " ".join(excinfo.value.message_dict["nfs_server"])


@pytest.mark.django_db
def test_a_row_saved_before_the_rule_is_not_rendered(research):
    """The renderer refuses it, naming the department, rather than write a broken exports file."""
    assert "/exports/tenants/research 10.64.0.0/24(" in render_current()["nfs/exports"]
    for path, message in (
        ("/exports/tenants/research\n/ *(rw,no_root_squash)", "a line break"),
        ("/exports/tenants/research/../../../etc", "'..'"),
        ("/srv/elsewhere", "is not inside the export root /exports/tenants"),
    ):
        Department.objects.filter(pk=research.pk).update(export_path=path)
        with pytest.raises(ValueError, match=r"department Research: .*" + re.escape(message)):
            render_current()


# --- property: every export path is refused or rendered as one intact entry ----------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=400, deadline=None)
@example("/exports/tenants/a\n")
@example("/exports/tenants/a\n/ *(rw,no_root_squash)")
@given(export_paths)
def test_an_export_path_is_refused_or_rendered_as_one_intact_entry(path):
    try:
        spec = tenant(export_path=path)
    except ValueError as error:
        assert "department 'research'" in str(error)
        # The model refuses it too, at save, naming the rule.
        with pytest.raises(ValidationError):
            validate_export_path(path)
        return
    validate_export_path(path)  # what renders is what the model takes: one rule
    [(parsed_path, client, options)] = parse_exports(r.render_nfs_exports([spec]))
    assert (parsed_path, client, options) == (path, "10.64.0.0/24", r.NFS_EXPORT_OPTIONS.split(","))
    [volume] = yaml.safe_load_all(k.to_yaml([k.persistent_volume(spec, "nfs.storage.internal")]))
    assert volume["spec"]["nfs"]["path"] == path


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.from_regex(r"/exports/tenants(/[a-z.]{1,3}){1,3}", fullmatch=True), min_size=2, max_size=4)
)
def test_exports_are_disjoint_or_refused(paths):
    specs = [
        tenant(
            f"d{i}",
            export_path=p,
            vlan_id=100 + i,
            vxlan_vni=10100 + i,
            pkey=0x100 + i,
            network_cidr=f"10.64.{i}.0/24",
        )
        for i, p in enumerate(paths)
        if not export_path_problem(p)
    ]
    try:
        text = r.render_nfs_exports(specs)
    except ValueError:
        return
    rendered = [path for path, _client, _options in parse_exports(text)]
    assert sorted(rendered) == sorted(s.export_path for s in specs)
    for a in rendered:
        assert not any(b != a and (b + "/").startswith(a + "/") for b in rendered)


# --- property: slurm.conf lines -----------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(hostname="gb-r01-t01\n", feature="a", partition="gpu", qos="q", address="", node_hostname="")
@example(
    hostname="n1", feature="nvl72\n", partition="gpu\n", qos="q\n", address="10.0.0.1\n", node_hostname=""
)
@example(hostname="n1", feature="a", partition="gpu", qos="", address="", node_hostname="h\nNodeName=x")
@given(
    hostname=free_text,
    feature=free_text,
    partition=free_text,
    qos=free_text,
    address=free_text,
    node_hostname=free_text,
)
def test_slurm_names_are_refused_or_rendered_as_one_intact_token(
    hostname, feature, partition, qos, address, node_hostname
):
    nodes = [SlurmNode(hostname, features=(feature,), address=address, node_hostname=node_hostname)]
    tiers = [ServiceTier(partition, (hostname,), default=True, allow_qos=(qos,))]
    try:
        text = render_rackplane_conf(nodes, tiers)
    except ValueError:
        return
    lines = slurm_lines(text)
    assert [line[0][0] for line in lines] == ["NodeName", "PartitionName"]
    [node] = parse_conf_lines(text, "NodeName")
    assert expand(node["NodeName"]) == [hostname]
    assert node["Features"] == feature
    assert node.get("NodeAddr", "") == address
    assert node.get("NodeHostName", "") == node_hostname
    [part] = parse_conf_lines(text, "PartitionName")
    assert part["PartitionName"] == partition
    assert expand(part["Nodes"]) == [hostname]
    assert part["AllowQos"] == qos


# --- property: Kubernetes YAML ------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@example(name="Research", project_name="Vision\x85")  # a plain NEL is read back as a space
@example(name="true\n", project_name="Vision\u2028kind: Secret")
@given(name=st.text(max_size=40), project_name=st.text(max_size=40))
def test_department_and_project_names_are_refused_or_read_back_intact(name, project_name):
    try:
        spec = tenant(name=name, projects=(r.ProjectSpec("vision", project_name, 0),), guaranteed_gpus=8)
    except ValueError:
        return
    objects = k.tenant_objects(spec, "nfs.storage.internal")
    documents = list(yaml.safe_load_all(k.to_yaml(objects)))
    assert documents == objects  # one document per object, every value as it went in
    namespaces = [d for d in documents if d["kind"] == "Namespace"]
    assert namespaces[0]["metadata"]["annotations"][k.DEPARTMENT_NAME_ANNOTATION] == name
    assert namespaces[1]["metadata"]["annotations"][k.PROJECT_NAME_ANNOTATION] == project_name
