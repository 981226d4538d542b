{{/* Names */}}
{{- define "lethe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lethe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "lethe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels; call with (dict "ctx" $ "component" "api") */}}
{{- define "lethe.labels" -}}
helm.sh/chart: {{ include "lethe.chart" .ctx }}
{{ include "lethe.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: lethe
{{- end }}

{{- define "lethe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lethe.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "lethe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lethe.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "lethe.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "lethe.secretName" -}}
{{- default (include "lethe.fullname" .) .Values.existingSecret }}
{{- end }}

{{/* The environment variable of a configuration key: file.unattached_ttl -> LETHE_FILE_UNATTACHED_TTL */}}
{{- define "lethe.envName" -}}
{{- printf "LETHE_%s" (. | replace "." "_" | upper) }}
{{- end }}

{{- define "lethe.fsDriver" -}}
{{- if eq (toString (index .Values.config "file.storage.driver")) "fs" }}true{{ end }}
{{- end }}

{{- define "lethe.fsClaim" -}}
{{- if .Values.storage.fs.existingClaim }}
{{- .Values.storage.fs.existingClaim }}
{{- else if .Values.storage.fs.create }}
{{- printf "%s-objects" (include "lethe.fullname" .) }}
{{- else }}
{{- fail "file.storage.driver fs needs a ReadWriteMany claim shared by api and worker: set storage.fs.existingClaim or storage.fs.create" }}
{{- end }}
{{- end }}

{{/* Pod-level security: non-root, fixed ids, RuntimeDefault seccomp. */}}
{{- define "lethe.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "lethe.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Annotations that roll the pods when the configuration changes. */}}
{{- define "lethe.podAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if not .Values.existingSecret }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* envFrom, volumes and mounts shared by every role. */}}
{{- define "lethe.envFrom" -}}
- configMapRef:
    name: {{ include "lethe.fullname" . }}
- secretRef:
    name: {{ include "lethe.secretName" . }}
{{- end }}

{{- define "lethe.volumes" -}}
- name: tmp
  emptyDir: {}
- name: metrics
  emptyDir: {}
{{- if include "lethe.fsDriver" . }}
- name: objects
  persistentVolumeClaim:
    claimName: {{ include "lethe.fsClaim" . }}
{{- end }}
{{- end }}

{{- define "lethe.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: metrics
  mountPath: /var/run/lethe/metrics
{{- if include "lethe.fsDriver" . }}
- name: objects
  mountPath: {{ .Values.storage.fs.mountPath }}
{{- end }}
{{- end }}

{{/* A duration of the configuration ("90s", "15m", "24h", "7d", "250ms") in whole seconds, for alert rules. */}}
{{- define "lethe.seconds" -}}
{{- $text := toString . | trim -}}
{{- if hasSuffix "ms" $text -}}{{- div (atoi (trimSuffix "ms" $text)) 1000 -}}
{{- else if hasSuffix "d" $text -}}{{- mul (atoi (trimSuffix "d" $text)) 86400 -}}
{{- else if hasSuffix "h" $text -}}{{- mul (atoi (trimSuffix "h" $text)) 3600 -}}
{{- else if hasSuffix "m" $text -}}{{- mul (atoi (trimSuffix "m" $text)) 60 -}}
{{- else -}}{{- atoi (trimSuffix "s" $text) -}}
{{- end -}}
{{- end }}

{{/* The worker's processes and threads: set once, under worker:; config.worker.* (deprecated) still wins. */}}
{{- define "lethe.workerProcesses" -}}
{{- index .Values.config "worker.processes" | default .Values.worker.processes -}}
{{- end }}
{{- define "lethe.workerThreads" -}}
{{- index .Values.config "worker.threads" | default .Values.worker.threads -}}
{{- end }}

{{/* Whether new files are sealed (file.encryption): as the values say when they say true or false; left empty, on
     for a new installation and, at an upgrade, as the installed release has it (off for one installed before the
     chart knew the key: its direct uploads and its layout stay as they were until the operator turns it on). */}}
{{- define "lethe.encryption" -}}
{{- $given := index .Values.config "file.encryption" }}
{{- if kindIs "bool" $given }}
{{- $given }}
{{- else if .Release.IsInstall }}
{{- true }}
{{- else }}
{{- $installed := lookup "v1" "ConfigMap" .Release.Namespace (include "lethe.fullname" .) }}
{{- index (($installed | default dict).data | default dict) "LETHE_FILE_ENCRYPTION" | default "false" }}
{{- end }}
{{- end }}

{{/* The OTEL_* variables of every role when tracing.endpoint is set (docs/operations.md, "Traces"), then the
role's extraEnv. */}}
{{- define "lethe.env" -}}
{{- $root := index . 0 -}}
{{- $extra := index . 1 -}}
{{- with $root.Values.tracing }}{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .sampler | quote }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | quote }}
{{- range $name, $value := .env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}{{- end }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}
