{{/* Chart name, at most 63 characters. */}}
{{- define "tierpush.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, at most 63 characters (DNS label). A release whose
name already contains the chart name is used as is.
*/}}
{{- define "tierpush.fullname" -}}
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

{{- define "tierpush.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object, without its component. */}}
{{- define "tierpush.commonLabels" -}}
helm.sh/chart: {{ include "tierpush.chart" . }}
app.kubernetes.io/name: {{ include "tierpush.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tierpush
{{- end }}

{{/* Labels of the processor's objects. */}}
{{- define "tierpush.labels" -}}
{{ include "tierpush.commonLabels" . }}
app.kubernetes.io/component: processor
{{- end }}

{{/* Labels selecting the processor pods (not the topics Job's). */}}
{{- define "tierpush.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tierpush.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: processor
{{- end }}

{{- define "tierpush.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tierpush.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tierpush.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The Secret holding the VAPID and HMAC keys: the chart's or an existing one. */}}
{{- define "tierpush.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "tierpush.fullname" .) }}
{{- end }}

{{/* Replicas are the autoscaler's business when one is enabled. */}}
{{- define "tierpush.autoscaled" -}}
{{- if or .Values.autoscaling.enabled .Values.keda.enabled }}true{{ end }}
{{- end }}

{{/* Comma-separated seed brokers. */}}
{{- define "tierpush.brokers" -}}
{{- join "," .Values.kafka.brokers }}
{{- end }}

{{/*
The keys are required: without secrets.existingSecret every one of the
chart's own Secret values must be set, or the pods would exit 2 at start
and crash-loop. Fail the render instead, saying what to do.
*/}}
{{- define "tierpush.requireKeys" -}}
{{- if not .Values.secrets.existingSecret }}
{{- $missing := list }}
{{- range $k := list "vapidPublicKey" "vapidPrivateKey" "vapidSubject" "hmacKey" }}
{{- if not (index $.Values.secrets $k) }}{{ $missing = append $missing (printf "secrets.%s" $k) }}{{ end }}
{{- end }}
{{- if $missing }}
{{- fail (printf "\n%s empty and secrets.existingSecret not set: the processor would exit 2 at start. Either create a Secret (processor vapid > vapid.env; kubectl create secret generic tierpush-keys --from-env-file=vapid.env --from-literal=TIERPUSH_HMAC_KEY=\"$(openssl rand -base64 32)\") and set secrets.existingSecret=tierpush-keys, or set all of secrets.vapidPublicKey, secrets.vapidPrivateKey, secrets.vapidSubject and secrets.hmacKey." (join ", " $missing)) }}
{{- end }}
{{- end }}
{{- end }}
