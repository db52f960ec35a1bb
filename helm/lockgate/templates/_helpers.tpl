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
{{- printf "http://%s-etcd.%s.svc:2379" (include "lockgate.fullname" .) .Release.Namespace -}}
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
