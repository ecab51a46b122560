"""`geotrain clusters add-kubernetes NAME --kubeconfig PATH [--context CTX]`."""

from __future__ import annotations

from core.state.store import Store


def register(groups) -> None:
    p = groups["clusters"].add_parser(
        "add-kubernetes", help="register an existing Kubernetes cluster that runs Volcano")
    p.add_argument("name", help="a short name for the cluster, e.g. gpu-east")
    p.add_argument("--kubeconfig", required=True, metavar="PATH",
                   help="the kubeconfig file (kept where it is; geotrain stores its path)")
    p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument("--namespace", help="namespace for workspaces (default: the context's)")
    p.add_argument("--queue", help="Volcano queue for workspaces (default: geotrain)")
    p.add_argument("--without-network-policy", action="store_true",
                   help="register even where the network plugin ignores NetworkPolicy (every pod there is trusted)")
    p.set_defaults(handler=cmd_add_kubernetes)


def cmd_add_kubernetes(args) -> int:
    from core.kubernetes.registration import register_kubernetes_cluster  # loads the k8s client

    done = register_kubernetes_cluster(Store(), args.name, args.kubeconfig, args.context,
                                       args.namespace, args.queue, args.without_network_policy)
    config = done.cluster.config
    nodes = sum(len(g.hostnames) for g in done.groups)
    kinds = ", ".join(f"{len(g.hostnames)}× {g.vendor}" + (f" ({g.gpus} GPUs)" if g.gpus else "")
                      + (f" in {g.datacenter}" if g.datacenter else "") for g in done.groups)
    print(f"Registered {done.cluster.name}: {nodes} nodes ({kinds}), context {config['context']}, "
          f"namespace {config['namespace']}, queue {config['queue']}.")
    for line in (done.pod_security, done.pod_security_note, done.network_policy):
        if line:
            print(line)
    if not done.queue_found:
        print(f"note: Volcano queue {config['queue']!r} was not found (or is not readable); "
              f"create it, or register with --queue default.")
    print(f"Deploy with `geotrain workspaces deploy distributed-training --cluster {done.cluster.name}`.")
    return 0
