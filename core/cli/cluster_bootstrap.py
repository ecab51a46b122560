"""`geotrain clusters deploy|delete|add-node|remove-node|import-kubeconfig`: the wizard, headless."""

from __future__ import annotations

import sys
from pathlib import Path

from core.bootstrap import STEP_NAMES
from core.bootstrap.deploy import DeployResult, build_plan, deploy
from core.bootstrap.checksums import parse_given
from core.bootstrap.failures import check_bundle
from core.bootstrap.kubeconfig_import import merge
from core.bootstrap.plan import ProgressEvent
from core.bootstrap.registry_mirrors import parse_mirrors
from core.bootstrap.teardown import delete_cluster, kept_text, remove_node
from core.cli.nodes import check_fingerprints
from core.cli.prompts import confirm_delete
from core.cli.output import table
from core.domain.terminal_text import printable
from core.state.cluster_records import get_cluster
from core.schema.endpoints import parse_host_port
from core.errors import InvalidInput
from core.kubernetes.names import validate_image
from core.state.store import Store


def register(groups) -> None:
    clusters = groups["clusters"]
    p = clusters.add_parser("deploy", help="build (or converge) a cluster on pool nodes")
    p.add_argument("name")
    p.add_argument("--nodes", required=True, complete="node-list",
                   help="comma-separated node names; the first runs the k3s server")
    p.add_argument("--no-vpn", action="store_true", help="no WireGuard mesh (one private network)")
    p.add_argument("--subnet", help="mesh subnet in CIDR form (default 10.99.0.0/24)")
    p.add_argument("--only", help=f"run only these steps: {','.join(STEP_NAMES)}")
    p.add_argument("--endpoint", action="append", default=[], metavar="NODE=HOST[:PORT]",
                   help="public WireGuard endpoint of a node behind NAT (repeatable)")
    p.add_argument("--k3s-bundle", metavar="DIR", help="air-gap: dir with the release's k3s "
                   "(k3s-arm64 for arm64), k3s-airgap-images-<arch>.tar (plain .tar, not .zst) and "
                   "containerd-<version>-linux-<arch>.tar.gz")
    p.add_argument("--volcano-manifest", metavar="FILE", help="a local volcano-development.yaml")
    p.add_argument("--sha256", action="append", default=[], metavar="FILE=HEX",
                   help="the sha256 of a release file geotrain pins none for (e.g. k3s=…, "
                   "k3s-airgap-images-amd64.tar=…), checked before it is installed (repeatable)")
    p.add_argument("--insecure-skip-checksum", action="store_true",
                   help="install release files no pinned or given sha256 vouches for")
    p.add_argument("--pull-images", action="store_true",
                   help="pull the workspace image into every node's containerd (the `images` step; "
                   "the default when no --image and no --k3s-bundle is given)")
    p.add_argument("--registry-mirror", action="append", default=[], metavar="REGISTRY=URL",
                   help="pull REGISTRY's images through a mirror first (containerd hosts.toml), e.g. "
                   "docker.io=https://mirror.example.com (repeatable)")
    p.add_argument("--no-pull-images", action="store_true",
                   help="leave the images step out: each node pulls its image when a first workspace starts")
    p.add_argument("--image", metavar="REF", help="the cluster's own workspace image (default: the "
                   "upstream PyTorch image per GPU vendor, with the recipes delivered by geotrain)")
    p.add_argument("--dry-run", action="store_true", help="print every command per node; run none")
    p.add_argument("--trust-host-key", action="append", default=[], metavar="SHA256:…",
                   help="re-pin a reinstalled server whose new key has this fingerprint")
    p.set_defaults(handler=cmd_deploy)
    p = clusters.add_parser("delete", help="undo what geotrain installed (k3s, the mesh, "
                            "/var/lib/geotrain on every node) and forget the cluster")
    p.add_argument("name", complete="cluster")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--keep-packages", action="store_true",
                   help="leave containerd and WireGuard packages installed")
    p.set_defaults(handler=cmd_delete)
    p = clusters.add_parser("add-node", help="add a pool node to a cluster")
    p.add_argument("name", complete="cluster")
    p.add_argument("node", complete="node")
    p.add_argument("--only", help="run only these steps (as for deploy)")
    p.set_defaults(handler=cmd_add_node)
    p = clusters.add_parser("remove-node", help="take a node out of a cluster")
    p.add_argument("name", complete="cluster")
    p.add_argument("node", complete="node")
    p.add_argument("--keep-packages", action="store_true")
    p.set_defaults(handler=cmd_remove_node)
    p = clusters.add_parser("import-kubeconfig", help="merge the cluster into ~/.kube/config")
    p.add_argument("name", complete="cluster")
    p.add_argument("--kubeconfig-path", help="the kubeconfig to merge into (default ~/.kube/config)")
    p.add_argument("--force", action="store_true", help="replace entries of the same name")
    p.set_defaults(handler=cmd_import_kubeconfig)


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _endpoints(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        node, sep, endpoint = value.partition("=")
        if not sep or not node or not endpoint:
            raise InvalidInput(f"--endpoint {value!r} is not NODE=HOST[:PORT]",
                               "write it like --endpoint gpu2=203.0.113.9:51820")
        parse_host_port(endpoint, 51820, f"--endpoint {node}=")  # an IP or DNS name, a port
        out[node] = endpoint
    return out


def _bundle(text: str) -> Path:
    return check_bundle(text)


def _print_event(event: ProgressEvent) -> None:
    """A step's line; a failure's message ends with the server's own words."""
    if event.state != "running":
        mark = {"done": "ok", "failed": "FAILED", "skipped": "skip"}[event.state]
        print(printable(f"[{event.node}] {event.step}: {mark}" + (
            f" — {event.message}" if event.state == "failed" else "")), flush=True)
    elif event.progress > 0:
        print(printable(f"[{event.node}] {event.step}: {event.message}"), flush=True)


def _print_dry_run(result: DeployResult) -> None:
    for name, target in result.targets.items():
        print(f"== {name} ({target.spec.role}) ==")
        for record in result.command_log.for_node(name):
            print(f"  [{record.step}] {record.kind}: {record.command}")
            if record.kind == "put":
                shown = record.content if record.content is not None else "(secret, not shown)"
                for line in shown.splitlines():
                    print(f"      | {line}")


def _report(result: DeployResult) -> int:
    blocked = {n: t.facts.get("blockers") for n, t in result.targets.items()
               if t.facts.get("blockers")}
    if blocked:
        print("\nBlockers (nothing was changed):")
        table(["node", "blocker"], [[n, b] for n, items in blocked.items() for b in items])
    print("\nSummary:")
    for line in result.summary.lines():
        print(f"  {printable(line)}")
    return 0 if result.summary.ok else 1


def cmd_deploy(args) -> int:
    store = Store()
    plan = build_plan(store, args.name, _split(args.nodes), vpn=not args.no_vpn,
                      subnet=args.subnet, endpoints=_endpoints(args.endpoint))
    if args.k3s_bundle:
        plan.k3s.bundle = str(_bundle(args.k3s_bundle))
    if args.volcano_manifest:
        if not Path(args.volcano_manifest).is_file():
            raise InvalidInput(f"--volcano-manifest {args.volcano_manifest} is not a file",
                               "give the path of a copy of volcano-development.yaml")
        plan.volcano.manifest = str(Path(args.volcano_manifest).resolve())
    if args.sha256:
        plan.k3s.sha256 = {**plan.k3s.sha256, **parse_given(args.sha256, plan.k3s.version)}
    if args.insecure_skip_checksum:
        plan.k3s.insecure_skip_checksum = True
    # The default images are 10-50 GB (core.domain.image_sizes): pulled at deploy, not while a
    # first workspace's rendezvous waits. A team's own image or an air-gapped site: asked for only.
    if args.pull_images or not (args.no_pull_images or args.image or args.k3s_bundle):
        plan.prepull = True
    if args.image:
        plan.image = validate_image(args.image)
    if args.registry_mirror:
        plan.registry_mirrors = parse_mirrors(args.registry_mirror)
    only = _split(args.only) or None
    result = deploy(plan, only=only, dry_run=args.dry_run, store=store,
                    on_event=None if args.dry_run else _print_event,
                    trust_host_keys=check_fingerprints(args.trust_host_key))
    if args.dry_run:
        _print_dry_run(result)
        return 0
    return _report(result)


def cmd_delete(args) -> int:
    record = get_cluster(Store(), args.name)  # an unknown name fails before any question
    if record.kind == "geotrain":
        print(f"Deleting cluster {args.name} ({', '.join(record.nodes) or 'no nodes'}). "
              + kept_text(record.config))
        if not confirm_delete(args.yes):
            print("Cancelled; nothing was deleted.")
            return 1
    result = delete_cluster(args.name, keep_packages=args.keep_packages, on_event=_print_event)
    code = _report(result)
    if code == 0:
        print(f"cluster {args.name} deleted")
    else:
        print("the cluster record is kept: fix the failures and run the delete again",
              file=sys.stderr)
    return code


def cmd_add_node(args) -> int:
    store = Store()
    get_cluster(store, args.name)  # adding to a cluster that does not exist is a mistake
    plan = build_plan(store, args.name, [args.node])
    return _report(deploy(plan, only=_split(args.only) or None, store=store,
                          on_event=_print_event))


def cmd_remove_node(args) -> int:
    result = remove_node(args.name, args.node, keep_packages=args.keep_packages,
                         on_event=_print_event)
    return _report(result)


def cmd_import_kubeconfig(args) -> int:
    print(merge(args.name, args.kubeconfig_path, force=args.force))
    return 0
