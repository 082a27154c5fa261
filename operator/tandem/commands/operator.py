"""``tandem operator``: run the Kubernetes operator (Kopf) until SIGTERM. Shell.

Exit codes: 0 after SIGTERM/SIGINT (the Lease released), 1 when the leader Lease was
lost or the operator failed (let Kubernetes restart the pod), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tandem.control.config import OperatorConfig
from tandem.control.restrictions import Restrictions
from tandem.controller.config import KopfTuning, LeaseConfig
from tandem.manifests.network import NetworkPeers

#: Every default below is the configuration's own (one source of defaults).
DEFAULTS = OperatorConfig(lease=LeaseConfig("-"))
LEASE = DEFAULTS.lease
KOPF = KopfTuning()
RESTRICTIONS = DEFAULTS.restrictions
PEERS = DEFAULTS.peers


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "operator",
        help="run the operator: reconcile InferenceServices into their pools, autoscale them",
        description="Watch InferenceServices and keep their Deployments, Services, "
        "PodDisruptionBudgets and NetworkPolicy as the spec says, resize each pool from "
        "live metrics, with status, Events and Prometheus metrics.",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        dest="namespaces",
        default=[],
        metavar="NS",
        help="serve this namespace (repeat for more)",
    )
    scope.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        help="serve every namespace (the default without --namespace)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=DEFAULTS.metrics_port,
        metavar="PORT",
        help="port of /metrics and /healthz (default %(default)s; 0 picks one)",
    )
    p.add_argument("--metrics-host", default=DEFAULTS.metrics_host, metavar="HOST")
    p.add_argument(
        "--liveness",
        default=DEFAULTS.liveness,
        metavar="URL",
        help="Kopf's liveness endpoint (default %(default)s; 'none' disables)",
    )
    p.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.leader_election,
        help="hold a coordination.k8s.io Lease so only one replica acts (default on: two "
        "operators without it would both write; --no-leader-election for a lone operator "
        "that may not create Leases)",
    )
    p.add_argument("--lease-name", default=LEASE.name, metavar="NAME")
    p.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", LEASE.namespace),
        metavar="NS",
        help="namespace of the Lease (default: $POD_NAMESPACE)",
    )
    p.add_argument(
        "--identity",
        default=None,
        metavar="ID",
        help="this replica's name in the Lease (default: $POD_NAME or host-pid)",
    )
    p.add_argument(
        "--lease-duration", type=float, default=LEASE.lease_duration_s, metavar="SECONDS"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=DEFAULTS.workers,
        metavar="N",
        help="InferenceServices reconciled concurrently (default %(default)s)",
    )
    p.add_argument(
        "--autoscaler",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.autoscaler,
        help="resize each InferenceService's pools from live metrics (default on; "
        "--no-autoscaler leaves pool sizes alone)",
    )
    policy = p.add_argument_group(
        "restrictions on every InferenceService (the chart sets them from its policy values)"
    )
    policy.add_argument(
        "--allowed-image-prefix",
        action="append",
        dest="image_prefixes",
        default=[],
        metavar="PREFIX",
        help="engine and router images must start with one of these (repeat; default: any)",
    )
    policy.add_argument(
        "--model-secrets",
        choices=("any", "prefixed", "none"),
        default=RESTRICTIONS.secrets,
        help="which Secret spec.model.secretRef may name: any in the namespace, only those "
        "named --model-secret-prefix*, or none (default %(default)s)",
    )
    policy.add_argument(
        "--model-secret-prefix", default=RESTRICTIONS.secret_prefix, metavar="PREFIX"
    )
    urls = policy.add_mutually_exclusive_group()
    urls.add_argument(
        "--allowed-prometheus-url",
        action="append",
        dest="prometheus_urls",
        default=[],
        metavar="URL",
        help="a Prometheus spec.autoscaling.metrics.url may point at (scheme, host, port if "
        "given, path prefix; repeat). Default: none, so the prometheus source is refused",
    )
    urls.add_argument(
        "--any-prometheus-url",
        action="store_true",
        help="let every spec name any URL the operator then queries (trusted tenants only)",
    )
    network = p.add_argument_group("who may reach the engine pods (their NetworkPolicy)")
    network.add_argument(
        "--operator-namespace",
        default=os.environ.get("POD_NAMESPACE", PEERS.operator_namespace),
        metavar="NS",
        help="the operator's own namespace (default: $POD_NAMESPACE, else %(default)s)",
    )
    network.add_argument(
        "--prometheus-namespace",
        action="append",
        dest="prometheus_namespaces",
        default=None,
        metavar="NS",
        help="a namespace whose Prometheus pods scrape engines with a PodMonitor (repeat; "
        f"default {', '.join(PEERS.prometheus_namespaces)})",
    )
    p.add_argument(
        "--event-spool",
        default=DEFAULTS.event_spool,
        metavar="PATH",
        help="file for the Events still undelivered when the operator stops (e.g. during "
        "an API outage); the next process posts them (the chart uses an emptyDir)",
    )
    p.add_argument(
        "--resync-interval",
        type=float,
        default=DEFAULTS.resync_interval_s,
        metavar="SECONDS",
        help="reconcile every service this often even without changes (default %(default)s)",
    )
    p.add_argument(
        "--watch-timeout",
        type=float,
        default=KOPF.watch_server_timeout_s,
        metavar="SECONDS",
        help="server-side timeout of each watch request (default %(default)s)",
    )
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="PATH",
        help="kubeconfig file (default: in-cluster, then $KUBECONFIG)",
    )
    p.add_argument("--context", default=None, metavar="NAME", help="kubeconfig context")
    p.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="API server URL, bypassing kubeconfig (with --token)",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("TANDEM_API_TOKEN"),
        metavar="TOKEN",
        help="bearer token for --server (default: $TANDEM_API_TOKEN)",
    )
    p.add_argument("--insecure-skip-tls-verify", action="store_true")
    p.add_argument("--log-format", choices=("plain", "full", "json"), default="full")
    level = p.add_mutually_exclusive_group()
    level.add_argument("--quiet", action="store_true", help="warnings and errors only")
    level.add_argument("--verbose", action="store_true", help="every reconcile")
    level.add_argument("--debug", action="store_true", help="also Kopf's internals")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    import kopf

    from tandem.control import Operator
    from tandem.control.config import default_identity
    from tandem.kube import KubeClient

    kopf.configure(
        debug=args.debug,
        verbose=args.verbose,
        quiet=args.quiet,
        log_format=kopf.LogFormat[args.log_format.upper()],
        log_prefix=args.log_format != "json",
    )
    identity = args.identity or os.environ.get("POD_NAME") or default_identity()
    try:
        lease = LeaseConfig(
            identity,
            name=args.lease_name,
            namespace=args.lease_namespace,
            lease_duration_s=args.lease_duration,
            renew_deadline_s=args.lease_duration * LEASE.renew_deadline_s / LEASE.lease_duration_s,
            retry_period_s=args.lease_duration * LEASE.retry_period_s / LEASE.lease_duration_s,
        )
    except ValueError as err:
        print(f"tandem operator: {err}")
        return 2
    config = OperatorConfig(
        namespaces=tuple(args.namespaces),
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        liveness=None if args.liveness.lower() == "none" else args.liveness,
        leader_election=args.leader_election,
        lease=lease,
        workers=args.workers,
        resync_interval_s=args.resync_interval,
        autoscaler=args.autoscaler,
        event_spool=args.event_spool,
        restrictions=Restrictions(
            image_prefixes=tuple(args.image_prefixes),
            secrets=args.model_secrets,
            secret_prefix=args.model_secret_prefix,
            prometheus_urls=None if args.any_prometheus_url else tuple(args.prometheus_urls),
        ),
        peers=NetworkPeers(
            operator_namespace=args.operator_namespace,
            prometheus_namespaces=tuple(
                PEERS.prometheus_namespaces
                if args.prometheus_namespaces is None
                else args.prometheus_namespaces
            ),
        ),
        kopf=KopfTuning(
            watch_server_timeout_s=args.watch_timeout,
            watch_client_timeout_s=args.watch_timeout
            + (KOPF.watch_client_timeout_s - KOPF.watch_server_timeout_s),
            watch_inactivity_timeout_s=args.watch_timeout
            + (KOPF.watch_inactivity_timeout_s - KOPF.watch_server_timeout_s),
        ),
    )
    agent = f"tandem-operator/{identity}"

    async def main() -> int:
        if args.server:
            client = KubeClient.for_url(
                args.server,
                token=args.token,
                user_agent=agent,
                insecure=args.insecure_skip_tls_verify,
            )
        else:
            client = await KubeClient.from_environment(
                kubeconfig=args.kubeconfig, context=args.context, user_agent=agent
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def trap_signals() -> None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)

        operator = Operator(client, config)

        async def keep_signals() -> None:
            # Kopf installs its own handlers when it starts; take them back so a SIGTERM
            # stops the reconciler before Kopf and releases the Lease.
            while not stop.is_set():
                if await asyncio.to_thread(operator.kopf_ready.wait, 0.5):
                    trap_signals()
                    await stop.wait()

        trap_signals()
        keeper = asyncio.create_task(keep_signals())
        try:
            return await operator.run(stop)
        finally:
            stop.set()
            await keeper
            await client.close()

    return asyncio.run(main())
