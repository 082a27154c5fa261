"""Process-backed Kubernetes nodes: a stand-in for the kubelet.

The agent registers N Nodes (capacity ``cpu``, ``memory``, ``pods`` and
``nvidia.com/gpu``), keeps their Leases and ``Ready`` condition fresh so the
node-lifecycle controller never evicts their pods, and runs the Pods the real scheduler
binds to them, each as local processes on a loopback address of its own (its pod IP,
127.0.X.Y). Everything it writes, it writes as ``system:node:<name>`` (group
``system:nodes``), so the Node authorizer and NodeRestriction admission apply as to a
kubelet.

What a pod gets: its containers' commands (the image mapped to a local program by
``cluster.images``), with ``$(VAR)`` expansion; the environment from values, the
downward API (``fieldRef``, ``resourceFieldRef``), ``secretKeyRef``, ``configMapKeyRef``
and ``envFrom``, plus ``KUBERNETES_SERVICE_HOST=127.0.0.1`` and
``KUBERNETES_SERVICE_PORT`` (the apiserver); its volumes (``nodeagent.volumes``: the
projected ServiceAccount token, ``ca.crt`` and ``namespace`` at
``/var/run/secrets/kubernetes.io/serviceaccount``, configMap, secret, downwardAPI and
emptyDir) bind-mounted in a private mount namespace per container process (``unshare``;
needs root), so in-cluster clients read their own pod's token at the fixed path (a
volume over a directory holding the host programs that stand in for the image, such as
an ``emptyDir`` at ``/tmp`` over a checkout in ``/tmp``, keeps them visible inside it); HTTP,
TCP and exec startup/readiness/liveness probes with their timing fields; ``preStop``
exec, httpGet and sleep hooks; SIGTERM, then SIGKILL after the grace period; restarts per
``restartPolicy`` with the kubelet's back-off; status (phase, conditions
``PodScheduled``, ``Initialized``, ``ContainersReady``, ``Ready``, container statuses with
``restartCount``, ``state``, ``ready``, ``started``) written when it changes; deletion
completed with ``gracePeriodSeconds=0`` once the containers are gone.

In a pod, "all addresses" and "this host" mean the pod's own address: ``0.0.0.0``,
``127.0.0.1`` and ``localhost:`` in commands, args and hooks are rewritten to the pod
IP, and Python programs bind wildcard addresses to it (``podsite/sitecustomize.py``).

What it does NOT do:

- no container runtime, no images: an image without a rule in ``cluster.images`` does
  not start (the container waits with the reason), and all pods share the host's
  filesystem, users and installed programs; ``securityContext`` is ignored (processes
  run as the agent's user), so is ``readOnlyRootFilesystem``;
- no CNI, no kube-proxy, no Service routing: a ClusterIP is a number in the API and
  nothing answers there; Service environment variables (``enableServiceLinks``) are not
  set; clients reach pods by pod IP, and every pod shares the host's network namespace
  (a port bound on one pod IP is not bound on the others);
- no cgroups: resource requests only steer the scheduler; limits are not enforced;
- no volumes but those above (no PersistentVolumes, hostPath, CSI); volume contents are
  written once at start and never refreshed; ``subPath`` works, ``subPathExpr`` does not;
- no init containers (such pods wait with a reason), no ephemeral containers, no gRPC
  probes (they fail, saying so), no ``postStart`` hooks;
- no kubelet API: ``kubectl logs``/``exec``/``port-forward`` do not work; each container's
  output is in the run's ``pods/<namespace>_<name>_<uid>/<container>.log``;
- no eviction by node pressure, no static pods, no image pulls, no ``hostNetwork`` ports.

A second mode, ``processless``, starts nothing: each pod is marked Running and Ready with
a pod IP as soon as it is bound, and its deletion completed at once (scale runs of
hundreds of pods).
"""
