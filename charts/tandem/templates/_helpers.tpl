{{/*
Base name of every object: fullnameOverride, else the release name (when it already
contains the chart name), else <release>-<chart>.
*/}}
{{- define "tandem.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of the operator's Deployment, Role and bindings. */}}
{{- define "tandem.operatorName" -}}
{{- printf "%s-operator" (include "tandem.fullname" .) -}}
{{- end -}}

{{- define "tandem.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" -}}
{{- end -}}

{{/*
Selector labels of the operator pods. `app.kubernetes.io/name: tandem-operator` is fixed
(not affected by nameOverride): the NetworkPolicy of every InferenceService's engines
admits metrics scrapes from pods carrying it.
*/}}
{{- define "tandem.selectorLabels" -}}
app.kubernetes.io/name: tandem-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tandem.labels" -}}
{{ include "tandem.selectorLabels" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: tandem
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "tandem.chart" . }}
{{- end -}}

{{- define "tandem.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tandem.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image: repository@digest when a digest is set, else repository:tag. */}}
{{- define "tandem.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "tandem.leaseName" -}}
{{- default (include "tandem.operatorName" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{/* Whether the operator serves every namespace (ClusterRole) or a list (Roles). */}}
{{- define "tandem.clusterWide" -}}
{{- if eq .Values.scope "cluster" -}}true{{- end -}}
{{- end -}}

{{/* The namespaces served with scope namespace, as a JSON list. */}}
{{- define "tandem.servedNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- toJson .Values.watchNamespaces -}}
{{- else -}}
{{- list .Release.Namespace | toJson -}}
{{- end -}}
{{- end -}}

{{/* A list of strings as a CEL list literal (the schema keeps quotes out of them). */}}
{{- define "tandem.celList" -}}
[{{- range $i, $s := . }}{{ if $i }}, {{ end }}'{{ $s }}'{{ end -}}]
{{- end -}}

{{/* Refuse value combinations that would deploy a broken operator. */}}
{{- define "tandem.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: without it every replica would reconcile and scale the same InferenceServices" -}}
{{- end -}}
{{- if and (eq .Values.scope "cluster") .Values.watchNamespaces -}}
{{- fail "watchNamespaces is for scope namespace; with scope cluster the operator serves every namespace" -}}
{{- end -}}
{{- if and .Values.policy.anyPrometheusURL .Values.policy.prometheusURLs -}}
{{- fail "policy.anyPrometheusURL allows every URL: leave policy.prometheusURLs empty" -}}
{{- end -}}
{{- if eq (int .Values.operator.metricsPort) (int .Values.operator.healthPort) -}}
{{- fail "operator.metricsPort and operator.healthPort must differ" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled (the monitor selects that Service)" -}}
{{- end -}}
{{- end -}}
