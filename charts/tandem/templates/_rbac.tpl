{{/*
What the operator does in a namespace it serves, one rule per purpose. Exactly these
verbs on exactly these resources: no wildcards, no Secrets, no pods/exec or proxy.
*/}}
{{- define "tandem.namespacedRules" -}}
# InferenceServices are only read: Kopf watches them and stores nothing on them (no
# finalizers, no annotations).
- apiGroups: ["serving.tandem.dev"]
  resources: ["inferenceservices"]
  verbs: ["get", "list", "watch"]
# Conditions, pool sizes and the autoscaler's state, through the status subresource.
- apiGroups: ["serving.tandem.dev"]
  resources: ["inferenceservices/status"]
  verbs: ["patch"]
# Children built per InferenceService: watched for drift, created, patched where they
# differ, deleted when the spec stops asking for them (the rest is garbage-collected
# through ownerReferences).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The autoscaler resizes each pool through the scale subresource only.
- apiGroups: ["apps"]
  resources: ["deployments/scale"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The router's read-only Role and its binding. Creating them requires holding what they
# grant (pods and inferenceservices get/list/watch, below and above): RBAC's escalation
# rule; no "bind" or "escalate" verb is needed or granted.
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# ServiceMonitor/PodMonitor when an InferenceService's spec.monitoring asks for them.
- apiGroups: ["monitoring.coreos.com"]
  resources: ["servicemonitors", "podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Engine pods: readiness and the IPs the autoscaler scrapes; before a scale-down it sets
# their controller.kubernetes.io/pod-deletion-cost so the least-loaded pods go first.
# RBAC cannot narrow a patch to one annotation: with admissionPolicy.enabled a
# ValidatingAdmissionPolicy refuses every other change this account makes to a pod.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
# The router Services' endpoints.
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch"]
# Events explaining every reconcile failure and scaling decision.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}
