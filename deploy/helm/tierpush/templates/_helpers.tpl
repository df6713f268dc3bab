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
and crash-loop. Fail the render instead, saying what to do. With
vapidKeys.existingSecret (an identity per app) the default VAPID identity
may be left out, all three values or none; the HMAC key stays required.
*/}}
{{- define "tierpush.requireKeys" -}}
{{- if not .Values.secrets.existingSecret }}
{{- $vapid := list "vapidPublicKey" "vapidPrivateKey" "vapidSubject" }}
{{- $required := append $vapid "hmacKey" }}
{{- if .Values.vapidKeys.existingSecret }}
{{- $given := 0 }}
{{- range $k := $vapid }}{{ if index $.Values.secrets $k }}{{ $given = add1 $given }}{{ end }}{{ end }}
{{- $required = ternary (list "hmacKey") $required (eq $given 0) }}
{{- end }}
{{- $missing := list }}
{{- range $k := $required }}
{{- if not (index $.Values.secrets $k) }}{{ $missing = append $missing (printf "secrets.%s" $k) }}{{ end }}
{{- end }}
{{- if and $missing .Values.vapidKeys.existingSecret }}
{{- fail (printf "\n%s empty and secrets.existingSecret not set: the processor would exit 2 at start. With vapidKeys.existingSecret the default VAPID identity is optional, but the HMAC key is not, and a default identity needs all of secrets.vapidPublicKey, secrets.vapidPrivateKey and secrets.vapidSubject." (join ", " $missing)) }}
{{- else if $missing }}
{{- fail (printf "\n%s empty and secrets.existingSecret not set: the processor would exit 2 at start. Either create a Secret (processor vapid > vapid.env; kubectl create secret generic tierpush-keys --from-env-file=vapid.env --from-literal=TIERPUSH_HMAC_KEY=\"$(openssl rand -base64 32)\") and set secrets.existingSecret=tierpush-keys, or set all of secrets.vapidPublicKey, secrets.vapidPrivateKey, secrets.vapidSubject and secrets.hmacKey (or vapidKeys.existingSecret, an identity per app, and secrets.hmacKey)." (join ", " $missing)) }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where the vapidKeys Secret is mounted, and the file the processor reads. */}}
{{- define "tierpush.vapidKeysDir" -}}/etc/tierpush-vapid{{- end }}
{{- define "tierpush.vapidKeysFile" -}}{{ include "tierpush.vapidKeysDir" . }}/vapid-keys.yaml{{- end }}

{{/*
Kafka TLS and SASL, the same for the processor and the topics Job: values
that cannot work fail the render, naming the value.
*/}}
{{- define "tierpush.kafkaSecurityCheck" -}}
{{- $tls := .Values.kafka.tls }}
{{- $sasl := .Values.kafka.sasl }}
{{- if and (not $tls.enabled) (or $tls.existingSecret $tls.clientCert $tls.serverName) }}
{{- fail "kafka.tls.existingSecret, clientCert or serverName is set but kafka.tls.enabled is false: set kafka.tls.enabled=true" }}
{{- end }}
{{- if and $tls.clientCert (not $tls.existingSecret) }}
{{- fail "kafka.tls.clientCert needs kafka.tls.existingSecret, the Secret holding the client certificate and key" }}
{{- end }}
{{- if and $sasl.mechanism (not $sasl.existingSecret) }}
{{- fail (printf "kafka.sasl.mechanism %s needs kafka.sasl.existingSecret, the Secret holding the password (and the user name unless kafka.sasl.username is set)" $sasl.mechanism) }}
{{- end }}
{{- if and (not $sasl.mechanism) (or $sasl.existingSecret $sasl.username) }}
{{- fail "kafka.sasl.existingSecret or username is set but kafka.sasl.mechanism is empty: set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512" }}
{{- end }}
{{- if and (eq $sasl.mechanism "PLAIN") (not $tls.enabled) }}
{{- fail "kafka.sasl.mechanism PLAIN sends the password in clear: set kafka.tls.enabled=true or use SCRAM-SHA-256/512" }}
{{- end }}
{{- end }}

{{/* Where the Kafka TLS and SASL Secrets are mounted. */}}
{{- define "tierpush.kafkaTLSDir" -}}/etc/tierpush-kafka/tls{{- end }}
{{- define "tierpush.kafkaSASLDir" -}}/etc/tierpush-kafka/sasl{{- end }}

{{/* TIERPUSH_KAFKA_* variables of a container that connects to Kafka. */}}
{{- define "tierpush.kafkaEnv" -}}
{{- $tls := .Values.kafka.tls }}
{{- $sasl := .Values.kafka.sasl }}
{{- if $tls.enabled }}
- name: TIERPUSH_KAFKA_TLS
  value: "true"
{{- if and $tls.existingSecret $tls.existingSecretKeys.ca }}
- name: TIERPUSH_KAFKA_TLS_CA
  value: {{ include "tierpush.kafkaTLSDir" . }}/ca.crt
{{- end }}
{{- if $tls.clientCert }}
- name: TIERPUSH_KAFKA_TLS_CERT
  value: {{ include "tierpush.kafkaTLSDir" . }}/tls.crt
- name: TIERPUSH_KAFKA_TLS_KEY
  value: {{ include "tierpush.kafkaTLSDir" . }}/tls.key
{{- end }}
{{- with $tls.serverName }}
- name: TIERPUSH_KAFKA_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if $sasl.mechanism }}
- name: TIERPUSH_KAFKA_SASL_MECHANISM
  value: {{ $sasl.mechanism | quote }}
- name: TIERPUSH_KAFKA_SASL_USER
{{- if $sasl.username }}
  value: {{ $sasl.username | quote }}
{{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.existingSecretKeys.username }}
{{- end }}
- name: TIERPUSH_KAFKA_SASL_PASSWORD_FILE
  value: {{ include "tierpush.kafkaSASLDir" . }}/password
{{- end }}
{{- end }}

{{/* Volumes of the Kafka TLS and SASL Secrets (both created beforehand). */}}
{{- define "tierpush.kafkaVolumes" -}}
{{- $tls := .Values.kafka.tls }}
{{- $sasl := .Values.kafka.sasl }}
{{- if and $tls.enabled $tls.existingSecret (or $tls.existingSecretKeys.ca $tls.clientCert) }}
- name: kafka-tls
  secret:
    secretName: {{ $tls.existingSecret }}
    items:
      {{- with $tls.existingSecretKeys.ca }}
      - key: {{ . }}
        path: ca.crt
      {{- end }}
      {{- if $tls.clientCert }}
      - key: {{ $tls.existingSecretKeys.cert }}
        path: tls.crt
      - key: {{ $tls.existingSecretKeys.key }}
        path: tls.key
      {{- end }}
{{- end }}
{{- if $sasl.mechanism }}
- name: kafka-sasl
  secret:
    secretName: {{ $sasl.existingSecret }}
    items:
      - key: {{ $sasl.existingSecretKeys.password }}
        path: password
{{- end }}
{{- end }}

{{/* Mounts of tierpush.kafkaVolumes. */}}
{{- define "tierpush.kafkaVolumeMounts" -}}
{{- $tls := .Values.kafka.tls }}
{{- if and $tls.enabled $tls.existingSecret (or $tls.existingSecretKeys.ca $tls.clientCert) }}
- name: kafka-tls
  mountPath: {{ include "tierpush.kafkaTLSDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.kafka.sasl.mechanism }}
- name: kafka-sasl
  mountPath: {{ include "tierpush.kafkaSASLDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
PromQL label matchers selecting this release's series: metrics.selector, or
the namespace and service labels a ServiceMonitor scrape of the release's
Service carries.
*/}}
{{- define "tierpush.promSelector" -}}
{{- .Values.metrics.selector | default (printf "namespace=%q,service=%q" .Release.Namespace (include "tierpush.fullname" .)) }}
{{- end }}

{{/*
GOMEMLIMIT: 90% of resources.limits.memory, in bytes. The limit must be a
whole number with a binary or decimal suffix (512Mi, 1Gi, 500M) or none.
*/}}
{{- define "tierpush.goMemLimit" -}}
{{- $q := .Values.resources.limits.memory }}
{{- $q = kindIs "float64" $q | ternary (printf "%.0f" $q) (toString $q) }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $n := regexFind "^[0-9]+" $q }}
{{- $unit := trimPrefix $n $q }}
{{- if or (not $n) (not (hasKey $units $unit)) }}
{{- fail (printf "resources.limits.memory %q: want a whole number with Ki, Mi, Gi, Ti, k, M, G or T (GOMEMLIMIT is set to 90%% of it)" $q) }}
{{- end }}
{{- div (mul (int64 $n) (index $units $unit) 9) 10 }}
{{- end }}

{{/* The Kafka ports of kafka.brokers (host:port), each once. */}}
{{- define "tierpush.kafkaPorts" -}}
{{- $ports := list }}
{{- range .Values.kafka.brokers }}
{{- $port := regexFind "[0-9]+$" . | default "9092" }}
{{- if not (has $port $ports) }}{{ $ports = append $ports $port }}{{ end }}
{{- end }}
{{- join "," $ports }}
{{- end }}
