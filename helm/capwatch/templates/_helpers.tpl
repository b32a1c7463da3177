{{- define "capwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "capwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "capwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "capwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "capwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "capwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "capwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "capwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
Checks a schema cannot express (they compare several values); `fail` stops the render
with the message, so `helm install` prints it before anything reaches the cluster.
*/}}
{{- define "capwatch.validate" -}}
{{- $url := toString (dig "store" "url" "capwatch.db" .Values.config) -}}
{{- $shared := or (hasPrefix "postgresql://" $url) (hasPrefix "postgres://" $url) .Values.store.urlSecret.name -}}
{{- if and (gt (int .Values.replicaCount) 1) (not $shared) -}}
{{- fail (printf "replicaCount %d needs a store every replica reaches, but config.store.url is SQLite (%s), which only one pod can write: set config.store.url to postgresql://... (or store.urlSecret) and persistence.enabled=false, or keep replicaCount 1" (int .Values.replicaCount) $url) -}}
{{- end -}}
{{- if and $shared .Values.persistence.enabled -}}
{{- fail "the store is PostgreSQL, so the SQLite volume is unused: set persistence.enabled=false" -}}
{{- end -}}
{{- $http := .Values.config.http | default dict -}}
{{- if eq (toString (dig "enabled" true $http)) "false" -}}
{{- fail "config.http.enabled is false, but the chart's probes, Service and ServiceMonitor use the HTTP port" -}}
{{- end -}}
{{- $tokenRef := include "capwatch.apiTokenRef" . | fromYaml -}}
{{- if and (eq (toString (dig "read_auth" false $http)) "true") (not $tokenRef.name) (not (dig "token" "" $http)) (not (dig "token_file" "" $http)) -}}
{{- fail "config.http.read_auth needs a token: keep apiToken.generate=true, name a Secret in secrets.apiToken, or set config.http.read_auth=false (an open read API)" -}}
{{- end -}}
{{- $host := toString (dig "host" "127.0.0.1" $http) -}}
{{- if or (eq $host "127.0.0.1") (eq $host "localhost") (eq $host "::1") -}}
{{- fail (printf "config.http.host %s is loopback: the kubelet's probes and Prometheus could not reach the pod; use 0.0.0.0" $host) -}}
{{- end -}}
{{- end -}}

{{- define "capwatch.httpPort" -}}
{{- dig "port" 9464 (.Values.config.http | default dict) -}}
{{- end -}}

{{/* The Secret key the API token comes from: the user's, the generated one, or none. */}}
{{- define "capwatch.apiTokenRef" -}}
{{- if .Values.secrets.apiToken.name -}}
{{- toYaml .Values.secrets.apiToken -}}
{{- else if .Values.apiToken.generate -}}
{{- toYaml (dict "name" (printf "%s-api-token" (include "capwatch.fullname" .)) "key" "token") -}}
{{- else -}}
{{- toYaml (dict "name" "" "key" "token") -}}
{{- end -}}
{{- end -}}
