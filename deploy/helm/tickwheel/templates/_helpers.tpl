{{/* Names and labels. */}}
{{- define "tickwheel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tickwheel.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tickwheel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tickwheel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tickwheel.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tickwheel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tickwheel
{{- end -}}

{{/* Labels of one component: (dict "root" $ "c" $component). */}}
{{- define "tickwheel.componentSelector" -}}
{{ include "tickwheel.selectorLabels" .root }}
app.kubernetes.io/component: {{ .c.name }}
{{- end -}}

{{- define "tickwheel.componentLabels" -}}
{{ include "tickwheel.labels" .root }}
app.kubernetes.io/component: {{ .c.name }}
tickwheel.io/process: {{ .c.process }}
{{- end -}}

{{/*
The Deployments: name (label and object suffix), key (in .Values) and process (the CLI sub-command).
Every per-component template ranges over this one list.
*/}}
{{- define "tickwheel.components" -}}
- {name: api, key: api, process: api}
- {name: coordinator, key: coordinator, process: coordinator}
- {name: dispatcher, key: dispatcher, process: dispatcher}
- {name: worker, key: worker, process: worker}
{{- if .Values.workerUrgent.enabled }}
- {name: worker-urgent, key: workerUrgent, process: worker}
{{- end }}
{{- end -}}

{{- define "tickwheel.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "tickwheel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tickwheel.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* One setting value as an env string: lists joined with commas, whole floats as integers. */}}
{{- define "tickwheel.envValue" -}}
{{- if kindIs "slice" . -}}
{{- join "," . -}}
{{- else if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
Every TICKWHEEL_* setting of the release as a YAML map (env name -> string): the ConfigMap and the
migration Job both render it, so they cannot disagree.
*/}}
{{- define "tickwheel.configData" -}}
{{- $data := dict -}}
{{- range $key, $value := .Values.config -}}
{{- if kindIs "map" $value -}}
{{- range $field, $v := $value -}}
{{- $_ := set $data (printf "TICKWHEEL_%s_%s" $key $field | upper) (include "tickwheel.envValue" $v) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $data (printf "TICKWHEEL_%s" $key | upper) (include "tickwheel.envValue" $value) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $data "TICKWHEEL_CASSANDRA" (join "," .Values.servers.cassandra.contactPoints) -}}
{{- $_ := set $data "TICKWHEEL_KAFKA" (join "," .Values.servers.kafka.bootstrap) -}}
{{- $_ := set $data "TICKWHEEL_ZOOKEEPER" (join "," .Values.servers.zookeeper.hosts) -}}
{{- if not (hasKey .Values.secrets.env "TICKWHEEL_REDIS") -}}
{{- $_ := set $data "TICKWHEEL_REDIS" .Values.servers.redis.url -}}
{{- end -}}
{{- range $process := list "api" "coordinator" "dispatcher" "worker" -}}
{{- $_ := set $data (printf "TICKWHEEL_%s_HOST" (upper $process)) "0.0.0.0" -}}
{{- $_ := set $data (printf "TICKWHEEL_%s_PORT" (upper $process)) (toString (index $.Values $process "port")) -}}
{{- end -}}
{{- toYaml $data -}}
{{- end -}}

{{/* env entries for the settings taken from the existing Secret. */}}
{{- define "tickwheel.secretEnv" -}}
{{- range $name, $key := .Values.secrets.env }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ required "secrets.existingSecret is required when secrets.env is set" $.Values.secrets.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end -}}

{{/* Fails the render when no worker Deployment consumes a lane. */}}
{{- define "tickwheel.checkLanes" -}}
{{- $lanes := .Values.worker.lanes -}}
{{- if .Values.workerUrgent.enabled -}}
{{- $lanes = concat $lanes .Values.workerUrgent.lanes -}}
{{- end -}}
{{- range $lane := list "urgent" "default" "bulk" -}}
{{- if not (has $lane $lanes) -}}
{{- fail (printf "no worker Deployment consumes the %s lane: add it to worker.lanes or enable workerUrgent" $lane) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "0|1|...|N": the forecast minutes a ScaledObject looks at (0 is the current minute). */}}
{{- define "tickwheel.minutesRegex" -}}
{{- $minutes := list -}}
{{- range $i := until (int (add1 .)) -}}
{{- $minutes = append $minutes (toString $i) -}}
{{- end -}}
{{- join "|" $minutes -}}
{{- end -}}

{{/* A container's env list (empty when nothing is set): (dict "root" $ "c" $component "v" $values). */}}
{{- define "tickwheel.containerEnv" -}}
{{- if eq .c.process "worker" }}
- name: TICKWHEEL_WORKER_LANES
  value: {{ join "," .v.lanes | quote }}
{{- end }}
{{- include "tickwheel.secretEnv" .root }}
{{- range $name, $value := .v.extraEnv }}
- name: {{ $name }}
  value: {{ include "tickwheel.envValue" $value | quote }}
{{- end }}
{{- end -}}
