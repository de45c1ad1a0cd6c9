{{/* Names and labels. */}}
{{- define "rackplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rackplane.fullname" -}}
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

{{- define "rackplane.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "rackplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "web"). */}}
{{- define "rackplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rackplane.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "rackplane.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rackplane.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rackplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The environment every Rackplane container gets: settings inline (no ConfigMap, so that the pre-install
migration hook, which runs before any other object of the release exists, sees the same settings) and the
secrets by reference. */}}
{{- define "rackplane.env" -}}
{{- $secret := required "secrets.existingSecret: name the Secret holding SECRET_KEY (docs/deployment/helm.md)" .Values.secrets.existingSecret -}}
- name: DEBUG
  value: "0"
- name: ALLOWED_HOSTS
  value: {{ required "config.allowedHosts: the host names users reach the portal by, comma-separated" .Values.config.allowedHosts | quote }}
- name: LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: LOG_FORMAT
  value: {{ .Values.config.logFormat | quote }}
- name: RACKPLANE_TLS
  value: {{ ternary "1" "0" .Values.config.tls | quote }}
- name: RACKPLANE_TLS_PROXY
  value: {{ ternary "1" "0" .Values.config.tlsProxy | quote }}
- name: RACKPLANE_READY_REQUIRES_BROKER
  value: {{ ternary "1" "0" .Values.config.readyRequiresBroker | quote }}
- name: RACKPLANE_DEV_ENV
  value: "0"
- name: SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.secrets.secretKeyKey }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ default $secret .Values.externalDatabase.existingSecret }}
      key: {{ .Values.externalDatabase.urlKey }}
- name: CELERY_BROKER_URL
  valueFrom:
    secretKeyRef:
      name: {{ default $secret .Values.externalRedis.existingSecret }}
      key: {{ .Values.externalRedis.urlKey }}
{{- if .Values.oidc.enabled }}
- name: OIDC_RP_CLIENT_ID
  valueFrom:
    secretKeyRef:
      name: {{ default $secret .Values.oidc.existingSecret }}
      key: {{ .Values.oidc.clientIdKey }}
- name: OIDC_RP_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ default $secret .Values.oidc.existingSecret }}
      key: {{ .Values.oidc.clientSecretKey }}
{{- end }}
{{- if .Values.metrics.existingSecret }}
- name: RACKPLANE_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.metrics.existingSecret }}
      key: {{ .Values.metrics.tokenKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rackplane.envFrom" -}}
{{- with .Values.extraEnvFrom }}
envFrom:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by every component: call with (dict "root" $ "component" "web"). */}}
{{- define "rackplane.podSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "rackplane.serviceAccountName" $root }}
automountServiceAccountToken: {{ $root.Values.automountServiceAccountToken }}
securityContext:
{{ toYaml $root.Values.podSecurityContext | indent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- if and $root.Values.topologySpreadConstraints (ne .component "beat") (ne .component "migrate") }}
topologySpreadConstraints:
{{- range $root.Values.topologySpreadConstraints }}
  - {{ toYaml (omit . "labelSelector") | indent 4 | trim }}
    labelSelector:
      matchLabels:
{{ include "rackplane.selectorLabels" (dict "root" $root "component" $.component) | indent 8 }}
{{- end }}
{{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: {{ $root.Values.tmpVolume.sizeLimit }}
  - name: var
    emptyDir:
      sizeLimit: {{ $root.Values.tmpVolume.sizeLimit }}
{{- end -}}

{{/* Container-level settings shared by every component. */}}
{{- define "rackplane.containerCommon" -}}
image: {{ include "rackplane.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
{{ toYaml .Values.securityContext | indent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  - name: var
    mountPath: /app/var
{{- include "rackplane.envFrom" . }}
{{- end -}}

{{- define "rackplane.podMetadata" -}}
metadata:
  labels:
    {{- include "rackplane.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- with .root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .root.Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
