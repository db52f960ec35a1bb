{{/* The release's base name for everything it creates. */}}
{{- define "lockgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lockgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lockgate.operatorSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "lockgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lockgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lockgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* etcd client URLs, comma-separated: the bundled member's Service, or the external endpoints. */}}
{{- define "lockgate.etcdEndpoints" -}}
{{- if .Values.etcd.bundled.enabled -}}
{{- $scheme := ternary "https" "http" (eq (include "lockgate.bundledEtcdTLS" .) "true") -}}
{{- printf "%s://%s-etcd.%s.svc:2379" $scheme (include "lockgate.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- required "etcd.endpoints is required when etcd.bundled.enabled is false" (join "," .Values.etcd.endpoints) -}}
{{- end -}}
{{- end -}}

{{/* Whether an optional Prometheus Operator object is rendered: true, false, or auto (its API is served). */}}
{{- define "lockgate.monitoringOn" -}}
{{- $setting := toString (index . 0) -}}
{{- $context := index . 1 -}}
{{- if or (eq $setting "true") (and (eq $setting "auto") ($context.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the bundled etcd runs with TLS and client certificates. */}}
{{- define "lockgate.bundledEtcdTLS" -}}
{{- and .Values.etcd.bundled.enabled .Values.etcd.bundled.tls -}}
{{- end -}}

{{/* "true" when the bundled etcd runs with authentication, which the operator enables. */}}
{{- define "lockgate.bundledEtcdAuth" -}}
{{- if and .Values.etcd.bundled.enabled .Values.etcd.bundled.auth -}}
{{- if not .Values.etcd.bundled.tls -}}
{{- fail "etcd.bundled.auth needs etcd.bundled.tls: without client certificates etcd would admit anyone until the operator enabled auth" -}}
{{- end -}}
true
{{- else -}}
false
{{- end -}}
{{- end -}}

{{/* "true" when the chart generates the bundled etcd's CA and certificates (the user named neither Secret). */}}
{{- define "lockgate.etcdCertsGenerated" -}}
{{- if eq (include "lockgate.bundledEtcdTLS" .) "true" -}}
{{- $server := .Values.etcd.bundled.serverSecret -}}
{{- $client := .Values.etcd.tls.secretName -}}
{{- if and (not $server) (not $client) -}}
true
{{- else if and $server $client -}}
false
{{- else -}}
{{- fail "etcd.bundled.serverSecret and etcd.tls.secretName: name both (certificates of one CA) or neither (the chart generates them)" -}}
{{- end -}}
{{- else -}}
false
{{- end -}}
{{- end -}}

{{/* The Secret (ca.crt, tls.crt, tls.key) the operator, drivers and executors connect to etcd with; empty: no TLS. */}}
{{- define "lockgate.etcdClientSecret" -}}
{{- if eq (include "lockgate.etcdCertsGenerated" .) "true" -}}
{{- printf "%s-etcd-client" (include "lockgate.fullname" .) -}}
{{- else -}}
{{- .Values.etcd.tls.secretName -}}
{{- end -}}
{{- end -}}

{{/* The bundled member's certificate Secret. */}}
{{- define "lockgate.etcdServerSecret" -}}
{{- default (printf "%s-etcd-server" (include "lockgate.fullname" .)) .Values.etcd.bundled.serverSecret -}}
{{- end -}}

{{/* The operator's etcd user; empty: none. */}}
{{- define "lockgate.etcdUser" -}}
{{- $bundledAuth := eq (include "lockgate.bundledEtcdAuth" .) "true" -}}
{{- if and $bundledAuth (not (has .Values.etcd.auth.user (list "" "root"))) -}}
{{- fail (printf "etcd.auth.user %q: the operator enables the bundled etcd's auth as root, the one user etcd lets manage users; leave it empty or root" .Values.etcd.auth.user) -}}
{{- end -}}
{{- if .Values.etcd.auth.user -}}
{{- .Values.etcd.auth.user -}}
{{- else if $bundledAuth -}}
root
{{- end -}}
{{- end -}}

{{/* The Secret with the operator's etcd password (key `password`). */}}
{{- define "lockgate.etcdPasswordSecret" -}}
{{- if .Values.etcd.auth.passwordSecret -}}
{{- .Values.etcd.auth.passwordSecret -}}
{{- else if and (not .Values.etcd.auth.user) (eq (include "lockgate.bundledEtcdAuth" .) "true") -}}
{{- printf "%s-etcd-root" (include "lockgate.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The operator's storage root; installing without one fails, saying what to set.
Nothing every cluster has could serve as a default: an emptyDir is one pod's, a claim
is one namespace's (jobs run in others) and ReadWriteOnce binds one node. */}}
{{- define "lockgate.storageRoot" -}}
{{- if and (not .Values.operator.checkpointStorage) (not .Values.operator.allowCustomStorageRoots) -}}
{{- fail "operator.checkpointStorage is required: the storage root where jobs keep checkpoints and savepoints, each namespace's under <root>/<namespace>/. Install with --set operator.checkpointStorage=s3://BUCKET/lockgate (or gs://BUCKET/lockgate, or file:///PATH on a ReadWriteMany volume the operator and every job's pods mount); docs/operations.md, \"Installing with Helm\"" -}}
{{- end -}}
{{- .Values.operator.checkpointStorage -}}
{{- end -}}

{{/* Labels of the etcd member's pods. */}}
{{- define "lockgate.etcdSelector" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end -}}
