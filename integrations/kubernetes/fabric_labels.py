"""The compute fabric as Topograph labelled the cluster's nodes, read back through the Kubernetes target
(issue 33): the Node list (`list_objects`, the read the target already does for its read-back), parsed by
the pure reader inventory.discovery.fabric.topograph. The import itself is inventory's
(inventory.fabric_import), which the `import_fabric_labels` command calls with this."""

from __future__ import annotations

from integrations.kubernetes.adapter import KubernetesAdapter
from integrations.kubernetes.kind import KIND
from integrations.kubernetes.target import KubernetesTarget
from inventory.discovery.fabric import topograph
from inventory.discovery.fabric.parsed import ParsedFabric


def is_kubernetes(target) -> bool:
    return target.kind == KIND.name


def read_nodes(client: KubernetesTarget) -> list[dict]:
    """Every Node's name and labels (nothing else of them is kept)."""
    return [
        {
            "metadata": {
                "name": (node.get("metadata") or {}).get("name"),
                "labels": (node.get("metadata") or {}).get("labels") or {},
            }
        }
        for node in client.list_objects("v1", "Node")
    ]


def read_fabric(target) -> ParsedFabric:
    """The fabric in the labels of a Kubernetes configuration target's nodes; FabricInputError when they
    carry none or contradict each other, KubernetesError subclasses when the cluster cannot be read."""
    with KubernetesAdapter(target, target.cleaned_settings())._target() as client:
        return topograph.parse(read_nodes(client))
