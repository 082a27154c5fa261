"""A real Kubernetes control plane on loopback for Tandem's end-to-end tests.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from the Go module
proxy (``build.sh``), started by a supervisor process (``supervisor``) with certificates
made at start (``pki``), and a node agent (``nodeagent``) that registers Nodes and runs
the Pods bound to them as local processes on loopback addresses. ``bash e2e/kube up`` /
``down`` drive it by hand; ``fixtures`` gives it to pytest.
"""
