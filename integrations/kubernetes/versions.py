"""The Kubernetes target's versions (integrations.versions): the facts its check keeps (API discovery), what
Rackplane writes there, and the removals ahead that can touch it."""

from django.utils.translation import gettext, gettext_noop

from integrations.versions import Facts, Removal, served

VERSION_FACTS = (
    ("kubernetes_version", "Kubernetes"),
    ("kueue_versions", gettext_noop("Kueue APIs served")),
    ("compute_domain_versions", gettext_noop("ComputeDomain APIs served")),
)


def uses(facts: Facts, settings: Facts) -> str:
    return gettext(
        "kueue.x-k8s.io/v1beta2 (ClusterQueue, Cohort, ResourceFlavor, Topology); "
        "resource.nvidia.com/v1beta1 (ComputeDomain); batch/v1 Jobs"
    )


REMOVALS = (
    Removal(
        key="kueue-v1beta1",
        what="Kueue API kueue.x-k8s.io/v1beta1",
        deprecated_in=gettext_noop("Kueue 0.15 (v1beta2 served; the storage version from 0.16)"),
        removed_in=gettext_noop("Kueue 0.20 stops serving it, 0.21 drops it"),
        due=None,
        touches=lambda facts: "v1beta1" in served(facts, "kueue_versions"),
        # Rackplane writes ClusterQueues, cohorts, flavors and the Topology as v1beta2.
        handled=lambda facts: "v1beta2" in served(facts, "kueue_versions"),
        what_to_do=gettext_noop(
            "upgrade Kueue to 0.15 or later: Rackplane writes kueue.x-k8s.io/v1beta2, which this cluster "
            "does not serve, so its queues cannot be applied"
        ),
        source="kubernetes-sigs/kueue #13957 (v1beta1 unserved in 0.20, dropped in 0.21) and #8018",
    ),
    Removal(
        key="computedomain-numnodes",
        what="ComputeDomain spec.numNodes (resource.nvidia.com/v1beta1)",
        deprecated_in="NVIDIA DRA driver, resource.nvidia.com/v1beta1",
        removed_in=gettext_noop("the driver's next ComputeDomain API version"),
        due=None,
        touches=lambda facts: "v1beta1" in served(facts, "compute_domain_versions"),
        # Rackplane writes numNodes: 0, as the CRD recommends; v1beta1 is the only version served so far.
        handled=lambda facts: "v1beta1" in served(facts, "compute_domain_versions"),
        what_to_do=gettext_noop(
            "nothing yet: Rackplane writes numNodes 0 as the driver recommends; a Rackplane release follows "
            "the next ComputeDomain API version"
        ),
        source="kubernetes-sigs/dra-driver-nvidia-gpu, ComputeDomain CRD: numNodes deprecated",
    ),
)
