{{/*
A medgym service's Deployment. The context: svc (the service and its NATS
user), v (its values), args (the service's own flags), trees (the library
trees to copy in: list of dicts tree/only), data (mount the shared data),
sandbox (the sandbox-worker's security context), plus Values, Release, Chart,
Files.
*/}}
{{- define "medgym.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "medgym.name" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "medgym.labels" . | nindent 4 }}
spec:
  {{- if not .scaled }}
  replicas: {{ .v.replicas }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "medgym.selector" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    {{- if .sandbox }}
    # One worker per node and every sandbox node busy: a surge pod could not
    # be scheduled, so a rollout replaces one worker at a time.
    rollingUpdate: {maxSurge: 0, maxUnavailable: 1}
    {{- else }}
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
    {{- end }}
  template:
    metadata:
      labels:
        {{- include "medgym.labels" . | nindent 8 }}
      annotations:
        {{- include "medgym.podAnnotations" (dict "port" .v.metricsPort) | nindent 8 }}
        {{- range .trees }}
        medgym.io/{{ .tree }}-tree: {{ include "medgym.libraryHash" (dict "tree" .tree "Values" $.Values) | quote }}
        {{- end }}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      {{- if .sandbox }}
      # Pod user namespace: root in the pod is an unprivileged uid on the host,
      # and /proc may be unmasked, which bwrap needs to mount a fresh /proc in
      # the sandbox's pid namespace (Kubernetes >= 1.33, user namespaces on).
      hostUsers: false
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        fsGroup: 10001
        seccompProfile:
          type: RuntimeDefault
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if .sandbox }}
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  {{- include "medgym.selector" . | nindent 18 }}
      {{- end }}
      terminationGracePeriodSeconds: 60
      {{- if .trees }}
      initContainers:
        {{- range .trees }}
        {{- include "medgym.libraryInit" (dict "tree" .tree "only" .only "Values" $.Values "Files" $.Files) | nindent 8 }}
        {{- end }}
      {{- end }}
      containers:
        - name: {{ .svc }}
          image: {{ printf "%s:%s" .Values.image.repository .Values.image.tag | quote }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          command: [{{ .svc | quote }}]
          args:
            - --metrics
            - $(POD_IP):{{ .v.metricsPort }}
            - --metrics-required
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            {{- range .v.args }}
            - {{ . | quote }}
            {{- end }}
          env:
            {{- include "medgym.commonEnv" . | nindent 12 }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - {name: metrics, containerPort: {{ .v.metricsPort }}, protocol: TCP}
          {{- include "medgym.probes" . | nindent 10 }}
          resources:
            {{- toYaml .v.resources | nindent 12 }}
          securityContext:
            {{- if .sandbox }}
            runAsNonRoot: true
            runAsUser: 10001
            runAsGroup: 10001
            allowPrivilegeEscalation: false
            privileged: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
            procMount: Unmasked
            seccompProfile:
              {{- toYaml .v.seccompProfile | nindent 14 }}
            appArmorProfile:
              {{- toYaml .v.appArmorProfile | nindent 14 }}
            {{- else }}
            {{- include "medgym.restrictedContainer" . | nindent 12 }}
            {{- end }}
          volumeMounts:
            - {name: nats-password, mountPath: /run/secrets/nats, readOnly: true}
            - {name: tmp, mountPath: /tmp}
            {{- if .trees }}
            - {name: library, mountPath: /library, readOnly: true}
            {{- end }}
            {{- if .data }}
            - {name: shared-data, mountPath: /shared/data, readOnly: true}
            {{- end }}
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "medgym.natsSecretVolume" . | nindent 8 }}
        - name: tmp
          emptyDir: {}
        {{- if .trees }}
        - name: library
          emptyDir: {}
        {{- end }}
        {{- if .data }}
        - name: shared-data
          {{- toYaml .Values.sharedData.volume | nindent 10 }}
        {{- end }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}

{{- define "medgym.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "medgym.name" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "medgym.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "medgym.selector" . | nindent 6 }}
{{- end -}}
