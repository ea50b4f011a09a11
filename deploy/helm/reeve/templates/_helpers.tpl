{{- define "reeve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "reeve.fullname" -}}
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

{{- define "reeve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "reeve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* selector labels of one component: (dict "ctx" $ "component" "scheduler") */}}
{{- define "reeve.selectorLabels" -}}
app.kubernetes.io/name: {{ include "reeve.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "reeve.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "reeve.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "reeve.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* etcd client URLs: the bundled StatefulSet's members, or etcd.endpoints */}}
{{- define "reeve.etcdEndpoints" -}}
{{- if .Values.etcd.bundled.enabled }}
{{- $fn := include "reeve.fullname" . }}
{{- $eps := list }}
{{- range $i := until (int .Values.etcd.bundled.replicas) }}
{{- $eps = append $eps (printf "http://%s-etcd-%d.%s-etcd-headless.%s.svc:2379" $fn $i $fn $.Release.Namespace) }}
{{- end }}
{{- join "," $eps }}
{{- else }}
{{- if not .Values.etcd.endpoints }}
{{- fail "etcd.endpoints is required (or etcd.bundled.enabled=true to try Reeve out)" }}
{{- end }}
{{- join "," .Values.etcd.endpoints }}
{{- end }}
{{- end }}

{{/* environment shared by schedulers and supervisors: etcd and logging */}}
{{- define "reeve.etcdEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: REEVE_ETCD_ENDPOINTS
  value: {{ include "reeve.etcdEndpoints" . | quote }}
{{- if and .Values.etcd.tls.secretName (not .Values.etcd.bundled.enabled) }}
- name: REEVE_ETCD_CA
  value: /etc/reeve/etcd/ca.crt
- name: REEVE_ETCD_CERT
  value: /etc/reeve/etcd/tls.crt
- name: REEVE_ETCD_KEY
  value: /etc/reeve/etcd/tls.key
{{- end }}
{{- if and .Values.etcd.auth.secretName (not .Values.etcd.bundled.enabled) }}
- name: REEVE_ETCD_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .Values.etcd.auth.secretName }}
      key: username
- name: REEVE_ETCD_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.etcd.auth.secretName }}
      key: password
{{- end }}
{{- end }}

{{- define "reeve.etcdVolumeMounts" -}}
{{- if and .Values.etcd.tls.secretName (not .Values.etcd.bundled.enabled) }}
- name: etcd-tls
  mountPath: /etc/reeve/etcd
  readOnly: true
{{- end }}
{{- end }}

{{- define "reeve.etcdVolumes" -}}
{{- if and .Values.etcd.tls.secretName (not .Values.etcd.bundled.enabled) }}
- name: etcd-tls
  secret:
    secretName: {{ .Values.etcd.tls.secretName }}
{{- end }}
{{- end }}

{{/* the scheduler Service's address, as supervisors and clients in the cluster use it */}}
{{- define "reeve.schedulerAddress" -}}
{{ include "reeve.fullname" . }}-scheduler.{{ .Release.Namespace }}.svc:{{ .Values.scheduler.port }}
{{- end }}
