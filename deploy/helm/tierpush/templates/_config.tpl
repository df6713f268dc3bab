{{/*
The processor's --config file, processor.yaml: keys that are flags of
`processor run` (it rejects unknown keys), plus the retry ladders (tiers:)
and the pacing settings (pacing:, each a --pacing-* flag without the prefix,
- written _). The processor's ConfigMap and the topics Job's (a hook, made
before the release's objects) hold the same file, so that the Job ensures
the topics the processor will use: prefix, ladders, partitions, retention.
*/}}
{{- define "tierpush.processorConfig" -}}
brokers:
{{- range .Values.kafka.brokers }}
  - {{ . | quote }}
{{- end }}
group: {{ .Values.kafka.group | quote }}
topic-prefix: {{ .Values.kafka.topicPrefix | quote }}
group-protocol: {{ .Values.kafka.groupProtocol | quote }}
session-timeout: {{ .Values.kafka.sessionTimeout | quote }}
heartbeat-interval: {{ .Values.kafka.heartbeatInterval | quote }}
remove-silent-after: {{ .Values.kafka.removeSilentAfter | quote }}
partitions: {{ .Values.topics.partitions | quote }}
replication-factor: {{ .Values.topics.replicationFactor | quote }}
retention: {{ .Values.topics.retention | quote }}
dlq-retention: {{ .Values.topics.dlqRetention | quote }}
max-in-flight: {{ .Values.config.maxInFlight | quote }}
max-held: {{ .Values.config.maxHeld | quote }}
retry-lateness: {{ .Values.config.retryLateness | quote }}
commit-interval: {{ .Values.config.commitInterval | quote }}
default-ttl: {{ .Values.config.defaultTTL | quote }}
send-timeout: {{ .Values.config.sendTimeout | quote }}
drain-timeout: {{ .Values.config.drainTimeout | quote }}
retry-jitter: {{ .Values.config.retryJitter | quote }}
log-format: {{ .Values.config.logFormat | quote }}
log-level: {{ .Values.config.logLevel | quote }}
{{- with .Values.config.allowInsecureEndpoints }}
allow-insecure-endpoint:
{{- range . }}
  - {{ . | quote }}
{{- end }}
{{- end }}
tiers:
{{- range $tier := list "tier1" "tier2" "tier3" }}
{{- $l := index $.Values.tiers $tier }}
  {{ $tier }}:
    steps: [{{ range $i, $s := $l.steps }}{{ if $i }}, {{ end }}{{ $s | quote }}{{ end }}]
    max_attempts: {{ $l.maxAttempts }}
    weight: {{ $l.weight }}
{{- end }}
pacing:
  cut_rate: {{ .Values.pacing.cut429Rate }}
  halt_rate: {{ .Values.pacing.halt429Rate }}
  max_concurrency: {{ .Values.pacing.maxConcurrency }}
  {{- with .Values.pacing.extra }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
