"""The NVLink fabric manager target: partitions applied rack by rack through NMX-M, or the simulated
fabric of the embedded mode."""

from django.utils.translation import gettext, gettext_noop, ngettext, pgettext

from integrations import fields as f
from integrations.fabric import versions as fabric_versions
from integrations.fabric.adapter import FabricAdapter
from integrations.fabric.mig_nodes import mig_nodes
from integrations.registry import Kind, Setting, register


def clean(values: dict, errors: dict) -> dict:
    """kind (simulated, the embedded default, or nmx: NVIDIA NMX Manager), base_url and token (nmx),
    insecure (do not verify NMX-M's certificate)."""
    out: dict = {"kind": f.text(values["kind"], "kind", errors) or "simulated"}
    if out["kind"] not in ("simulated", "nmx"):
        errors["kind"] = "must be simulated or nmx"
    out["base_url"] = f.text(values["base_url"], "base_url", errors)
    out["token"] = f.text(values["token"], "token", errors)
    out["insecure"] = f.flag(values["insecure"], "insecure", errors)
    if out["kind"] == "nmx":
        if not out["base_url"]:
            errors["base_url"] = "is required for NMX-M (https://nmx-m.example)"
        else:
            out["base_url"] = f.url(out["base_url"], "base_url", errors)
    return out


def summary(values: dict) -> str:
    """Where the target points, in the viewer's language (the push pages; the API's in its client's)."""
    if values.get("kind") == "nmx":
        return gettext("NMX-M at %(url)s") % {"url": values.get("base_url")}
    return gettext("simulated fabric (in memory, this process)")


def describe(payload: dict) -> list[str]:
    """What a push's payload holds, in the viewer's language (the push page)."""
    racks = payload.get("racks") or []
    partitions = sum(len(rack["partitions"]) for rack in racks)
    return [
        ngettext("%(count)s rack", "%(count)s racks", len(racks)) % {"count": f"{len(racks):,}"}
        + pgettext("between the items of a list in a sentence", ", ")
        + ngettext("%(count)s NVLink partition", "%(count)s NVLink partitions", partitions)
        % {"count": f"{partitions:,}"}
    ]


def payload(rendered, values: dict) -> dict:
    """The racks' partitions; the simulated fabric also carries the MIG layouts its simulated nodes are given
    (integrations.fabric.mig_nodes: they apply them as the GPU Operator's MIG manager would), when any is."""
    out: dict = {"racks": rendered.fabric_racks()}
    if values.get("kind") == "simulated":
        nodes = mig_nodes(rendered.state.kubernetes.inventory.nodes)
        if nodes:
            out["mig_nodes"] = nodes
    return out


def scoped_payload(rendered, values: dict) -> dict:
    """`payload` for the scope's racks alone (integrations.rendering): the adapter applies rack by rack, and
    leaves every rack the payload does not name as the fabric holds it."""
    out: dict = {"racks": rendered.slice_fabric_racks()}
    if values.get("kind") == "simulated":
        nodes = mig_nodes(rendered.slice.inventory.nodes)
        if nodes:
            out["mig_nodes"] = nodes
    return out


KIND = register(
    Kind(
        name="fabric",
        label=gettext_noop("NVLink fabric manager"),
        settings=(
            Setting(
                "kind",
                "simulated",
                f.choice_field(
                    gettext_noop("Fabric manager"),
                    [
                        ("simulated", gettext_noop("Simulated (embedded)")),
                        ("nmx", gettext_noop("NVIDIA NMX Manager")),
                    ],
                    "simulated",
                ),
                form_name="fabric_kind",
            ),
            Setting(
                "base_url",
                "",
                f.text_field(gettext_noop("NMX-M address"), gettext_noop("https://nmx-m.example")),
            ),
            Setting(
                "token", "", f.token_field(gettext_noop("NMX-M token")), secret=True, form_name="fabric_token"
            ),
            Setting(
                "insecure",
                False,
                f.flag_field(gettext_noop("Skip TLS verification"), gettext_noop("For testing only.")),
                form_name="fabric_insecure",
            ),
        ),
        clean=clean,
        adapter=FabricAdapter,
        payload=lambda rendered, values: payload(rendered, values),
        scoped_payload=scoped_payload,
        summary=summary,
        what_to_do=(
            "check the fabric manager and the NVLink partitions of the rack named above, then retry the push "
            "(it only does what is still missing)"
        ),
        needs_fabric=True,
        atomic=False,
        describe=describe,
        order=40,
        version_facts=fabric_versions.VERSION_FACTS,
        uses=fabric_versions.uses,
        removals=fabric_versions.REMOVALS,
    )
)
