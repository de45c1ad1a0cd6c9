"""Kubernetes backend: `render` (pure object renderers), `tenants` (pure: the tenants' namespaces, quotas,
policies, queues and volumes), `validate` (the real schemas, before sending) and `target` (KubernetesTarget,
the adapter: server-side apply through the official client).

`crds/` holds byte-identical copies of the published CRDs (Kueue v1beta2, NVIDIA ComputeDomain): the
CRD versions Rackplane validates custom resources against.
"""
