"""Set up the test Kubernetes API server started by scripts/kube-testbed.sh (run with the project's .venv).

    kube_testbed.py setup --kubeconfig ADMIN --crds DIR --rbac FILE --token-out FILE
    kube_testbed.py crds --kubeconfig ADMIN --crds DIR [--empty-others DIR2]
    kube_testbed.py kueue-config --out FILE

`setup` server-side applies every CRD in DIR and waits until each is Established, applies the RBAC file (the
`rackplane` ServiceAccount and exactly the permissions Rackplane needs), then asks the TokenRequest API for
a token of that service account and writes it to FILE. `crds` only applies DIR's CRDs (Kueue's own, when
scripts/kube-testbed.sh starts Kueue); with `--empty-others DIR2` it first deletes every object of the CRDs
of DIR2 that DIR has not (their finalizers dropped: the controller that would remove them has stopped), so
that after Kueue stops its Workloads hold nothing and DIR's CRDs (Rackplane's) are again the ones served for
the kinds both have. Every apply has the same field manager, so applying one set over another leaves no
field of the other behind. Talks to the server as
the admin of the kubeconfig. `kueue-config` writes the Kueue Configuration Rackplane asks a site to give
Kueue (integrations.kubernetes.tenants.kueue_configuration: the IMEX channel DeviceClass mapped to a quota
resource), which scripts/kube-testbed.sh starts the testbed's Kueue with.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import ssl
import sys
import time
import urllib.error
import urllib.request

import yaml

# (apiVersion, kind) -> (collection path, namespaced) for what the set-up applies.
PATHS = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        False,
    ),
    ("v1", "Namespace"): ("/api/v1/namespaces", False),
    ("v1", "ServiceAccount"): ("/api/v1/namespaces/{ns}/serviceaccounts", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        False,
    ),
}
TOKEN_SECONDS = 7 * 24 * 3600
# libyaml's parser when PyYAML has it: Kueue's Workload CRD (1.4 MB) takes seconds in the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: pathlib.Path):
    return yaml.load(path.read_text(), Loader=_LOADER)


class Server:
    def __init__(self, kubeconfig: pathlib.Path):
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self.url = cluster["server"].rstrip("/")
        self.token = config["users"][0]["user"]["token"]
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])

    def request(self, method: str, path: str, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise SystemExit(
                f"{method} {path}: {error.code} {error.read().decode(errors='replace')}"
            ) from None

    def request_or_none(self, method: str, path: str, body=None, content_type="application/json"):
        """`request`, with None for an object that is not there (404)."""
        try:
            return self.request(method, path, body, content_type)
        except SystemExit as error:
            if ": 404 " in str(error):
                return None
            raise

    def served(self, path: str) -> bool:
        request = urllib.request.Request(self.url + path)
        request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30):
                return True
        except urllib.error.HTTPError as error:
            if error.code == 429:
                return False
            raise SystemExit(f"GET {path}: {error.code} {error.read().decode(errors='replace')}") from None

    def apply(self, obj: dict) -> None:
        collection, namespaced = PATHS[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        if namespaced:
            collection = collection.format(ns=meta["namespace"])
        self.request(
            "PATCH",
            f"{collection}/{meta['name']}?fieldManager=kube-testbed&force=true",
            obj,
            "application/apply-patch+yaml",
        )


def apply_crds(server: Server, directory: str) -> None:
    """Server-side apply every CRD in `directory`; return once each is Established and served."""
    names = []
    for path in sorted(pathlib.Path(directory).glob("*.yaml")):
        crd = load_yaml(path)
        server.apply(crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + 30
    for name in names:
        while True:
            crd = server.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"CRD {name} was not Established within 30 s: {conditions}")
            time.sleep(0.1)
    # Established is not yet served: each resource's storage answers 429 "storage is (re)initializing" for a
    # moment. Wait until a list answers, so the first test does not meet it.
    for name in names:
        crd = server.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        while not server.served(f"/apis/{group}/{version}/{plural}"):
            if time.monotonic() > deadline:
                raise SystemExit(f"{plural}.{group} was not served within 30 s")
            time.sleep(0.1)
    print(f"CRDs established and served: {', '.join(names)}")


def empty_crds(server: Server, directory: str, keep: str) -> None:
    """Delete every object of the CRDs of `directory` that `keep` has not, finalizers dropped first (the
    controller that would remove them has stopped). The CRDs themselves stay: deleting one keeps the API
    server busy for seconds, and an empty kind changes nothing for anyone."""
    kept = {load_yaml(p)["metadata"]["name"] for p in pathlib.Path(keep).glob("*.yaml")}
    crds_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for path in sorted(pathlib.Path(directory).glob("*.yaml")):
        crd = load_yaml(path)
        name = crd["metadata"]["name"]
        if name in kept or server.request_or_none("GET", f"{crds_path}/{name}") is None:
            continue
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        items = (server.request("GET", f"/apis/{group}/{version}/{plural}") or {}).get("items") or []
        for item in items:
            meta = item["metadata"]
            where = f"namespaces/{meta['namespace']}/" if meta.get("namespace") else ""
            path_of = f"/apis/{group}/{version}/{where}{plural}/{meta['name']}"
            if meta.get("finalizers"):
                server.request_or_none(
                    "PATCH", path_of, {"metadata": {"finalizers": None}}, "application/merge-patch+json"
                )
            server.request_or_none("DELETE", path_of)
        if items:
            print(f"deleted {len(items)} {plural}.{group}")


def setup(args: argparse.Namespace) -> None:
    server = Server(pathlib.Path(args.kubeconfig))
    apply_crds(server, args.crds)
    for obj in yaml.safe_load_all(pathlib.Path(args.rbac).read_text()):
        if obj:
            server.apply(obj)
    print(f"applied {args.rbac}")
    answer = server.request(
        "POST",
        "/api/v1/namespaces/rackplane/serviceaccounts/rackplane/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )
    out = pathlib.Path(args.token_out)
    out.write_text(answer["status"]["token"])
    out.chmod(0o600)
    print("token of system:serviceaccount:rackplane:rackplane written")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("setup")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--crds", required=True)
    p.add_argument("--rbac", required=True)
    p.add_argument("--token-out", required=True)
    p = commands.add_parser("crds")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--crds", required=True)
    p.add_argument("--empty-others", metavar="DIR")
    p = commands.add_parser("kueue-config")
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "setup":
        setup(args)
        return
    if args.command == "kueue-config":
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
        from integrations.kubernetes.tenants import kueue_configuration

        pathlib.Path(args.out).write_text(yaml.safe_dump(kueue_configuration(), sort_keys=False))
        return
    server = Server(pathlib.Path(args.kubeconfig))
    if args.empty_others:
        empty_crds(server, args.empty_others, keep=args.crds)
    apply_crds(server, args.crds)


if __name__ == "__main__":
    main(sys.argv[1:])
