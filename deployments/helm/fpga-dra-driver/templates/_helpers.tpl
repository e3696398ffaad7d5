{{/* Chart name, overridable. */}}
{{- define "fpga-dra-driver.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name: the prefix of every object. */}}
{{- define "fpga-dra-driver.fullname" -}}
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

{{- define "fpga-dra-driver.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "fpga-dra-driver.labels" -}}
helm.sh/chart: {{ include "fpga-dra-driver.chart" . }}
app.kubernetes.io/name: {{ include "fpga-dra-driver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: pass (list . "component"). */}}
{{- define "fpga-dra-driver.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "fpga-dra-driver.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "fpga-dra-driver.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fpga-dra-driver.priorityClassName" -}}
{{- default (include "fpga-dra-driver.fullname" .) .Values.priorityClass.name -}}
{{- end -}}

{{/* The priority class of a component: its own, else the chart's when created. */}}
{{- define "fpga-dra-driver.componentPriorityClass" -}}
{{- $ := index . 0 -}}
{{- $own := index . 1 -}}
{{- if $own -}}
{{- $own -}}
{{- else if $.Values.priorityClass.create -}}
{{- include "fpga-dra-driver.priorityClassName" $ -}}
{{- end -}}
{{- end -}}

{{- define "fpga-dra-driver.nodeServiceAccount" -}}
{{- printf "%s-kubeletplugin" (include "fpga-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fpga-dra-driver.controllerServiceAccount" -}}
{{- printf "%s-controller" (include "fpga-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fpga-dra-driver.webhookService" -}}
{{- printf "%s-webhook" (include "fpga-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Secret with the webhook's serving certificate. */}}
{{- define "fpga-dra-driver.webhookSecret" -}}
{{- default (printf "%s-webhook-tls" (include "fpga-dra-driver.fullname" .)) .Values.controller.webhook.tls.secretName -}}
{{- end -}}

{{- define "fpga-dra-driver.webhookConfiguration" -}}
{{- include "fpga-dra-driver.fullname" . -}}
{{- end -}}

{{- define "fpga-dra-driver.leaseName" -}}
{{- printf "%s-controller" (include "fpga-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fpga-dra-driver.certificateName" -}}
{{- printf "%s-webhook" (include "fpga-dra-driver.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* --sim-program-delays from simulation.programDelays ({afuID: duration}). */}}
{{- define "fpga-dra-driver.simDelays" -}}
{{- $items := list -}}
{{- range $id, $d := . -}}
{{- $items = append $items (printf "%s=%s" $id $d) -}}
{{- end -}}
--sim-program-delays={{ join "," $items }}
{{- end -}}
