{{/* Names, labels and the pieces every medgym pod shares. */}}

{{- define "medgym.name" -}}
{{- printf "%s-%s" .Release.Name .svc | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "medgym.labels" -}}
app.kubernetes.io/name: {{ .svc }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: medgym
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "medgym.selector" -}}
app.kubernetes.io/name: {{ .svc }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The nats dependency's full name, as its chart computes it. */}}
{{- define "medgym.natsFullname" -}}
{{- if .Values.nats.fullnameOverride -}}
{{- .Values.nats.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "nats" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-nats" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* --nats: the seed URLs, one per node of the JetStream cluster. */}}
{{- define "medgym.natsURLs" -}}
{{- if .Values.natsURLs -}}
{{- .Values.natsURLs -}}
{{- else -}}
{{- $n := include "medgym.natsFullname" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.nats.config.cluster.replicas) -}}
{{- $urls = append $urls (printf "nats://%s-%d.%s-headless.%s.svc:4222" $n $i $n $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}
{{- end -}}

{{- define "medgym.kedaEndpoint" -}}
{{- if .Values.keda.monitoringEndpoint -}}
{{- .Values.keda.monitoringEndpoint -}}
{{- else -}}
{{- $n := include "medgym.natsFullname" . -}}
{{- printf "%s-headless.%s.svc.cluster.local:%v" $n .Release.Namespace .Values.nats.config.monitor.port -}}
{{- end -}}
{{- end -}}

{{- define "medgym.s3Endpoint" -}}
{{- if .Values.store.s3.endpoint -}}
{{- .Values.store.s3.endpoint -}}
{{- else -}}
{{- printf "%s-minio:9000" .Release.Name -}}
{{- end -}}
{{- end -}}

{{/* The library image and hash of a tree, required. */}}
{{- define "medgym.libraryImage" -}}
{{- $t := index .Values.library .tree -}}
{{- required (printf "library.%s.image: the %s tree's image (deploy/kubernetes/README.md)" .tree .tree) $t.image -}}
{{- end -}}
{{- define "medgym.libraryHash" -}}
{{- $t := index .Values.library .tree -}}
{{- $h := required (printf "library.%s.hash: the %s tree's content hash, sha256:<hex>" .tree .tree) $t.hash -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" $h) -}}
{{- fail (printf "library.%s.hash %q is not sha256:<64 hex digits>" .tree $h) -}}
{{- end -}}
{{- $h -}}
{{- end -}}

{{/*
An init container that copies one library tree (image .tree) into the volume
"library" at /library/<tree>, checking first that the files hash to the
manifest's recorded hash and that it is the hash the release names: the same
sha256 of "<file sha256>  <path>" lines in path order that tasks.WriteManifests
computes. .only, if set, copies that one file (the agent manifest for the
verifier).
*/}}
{{- define "medgym.libraryInit" -}}
- name: library-{{ .tree }}
  image: {{ include "medgym.libraryImage" . }}
  imagePullPolicy: IfNotPresent
  command: ["/bin/sh", "-ec"]
  args:
    - |
      {{- .Files.Get "files/library-init.sh" | nindent 6 }}
  env:
    - {name: TREE, value: {{ .tree | quote }}}
    - {name: WANT_HASH, value: {{ include "medgym.libraryHash" . | quote }}}
    - {name: ONLY, value: {{ .only | default "" | quote }}}
  volumeMounts:
    - {name: library, mountPath: /mnt/library}
  securityContext:
    {{- include "medgym.restrictedContainer" . | nindent 4 }}
  resources:
    requests: {cpu: 100m, memory: 64Mi}
    limits: {cpu: "1", memory: 256Mi}
{{- end -}}

{{- define "medgym.restrictedContainer" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Environment every service shares: pod IP, NATS user and password file, replicas. */}}
{{- define "medgym.commonEnv" -}}
- name: POD_IP
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
- {name: MEDGYM_NATS, value: {{ include "medgym.natsURLs" . | quote }}}
- {name: MEDGYM_REPLICAS, value: {{ .Values.streamReplicas | quote }}}
- {name: MEDGYM_NATS_USER, value: {{ .svc | quote }}}
- {name: MEDGYM_NATS_PASSWORD_FILE, value: /run/secrets/nats/password}
{{- end -}}

{{- define "medgym.natsSecretVolume" -}}
- name: nats-password
  secret:
    secretName: {{ .Values.natsAuth.existingSecret }}
    defaultMode: 0440
    items:
      - {key: {{ .svc | quote }}, path: password}
{{- end -}}

{{/* Probes on /healthz and the metrics port; the pod template's annotations. */}}
{{- define "medgym.probes" -}}
readinessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 5
  failureThreshold: 2
# A NATS node's restart or a leader change makes /healthz 503 for a few
# seconds while the client reconnects to another seed URL: only two minutes
# of it restart the container.
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  initialDelaySeconds: 10
  periodSeconds: 10
  failureThreshold: 12
{{- end -}}

{{- define "medgym.podAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
