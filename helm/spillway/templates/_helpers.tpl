{{/* Names and labels. */}}

{{- define "spillway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "spillway.fullname" -}}
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

{{- define "spillway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; component-specific ones add app.kubernetes.io/component. */}}
{{- define "spillway.labels" -}}
helm.sh/chart: {{ include "spillway.chart" . }}
app.kubernetes.io/name: {{ include "spillway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: spillway
{{- end -}}

{{/* Selector labels of the router pods (the Deployment, Service, PDB, ServiceMonitor). */}}
{{- define "spillway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spillway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: router
{{- end -}}

{{/* Selector labels of the NVML agent pods. */}}
{{- define "spillway.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "spillway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "spillway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "spillway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "spillway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when more than one router replica may run. */}}
{{- define "spillway.multiReplica" -}}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) -}}true{{- end -}}
{{- end -}}

{{/* The directory of the SQLite ledger (an emptyDir or existingClaim is mounted there). */}}
{{- define "spillway.ledgerDir" -}}
{{- dir .Values.ledger.sqlite.path -}}
{{- end -}}

{{/* The env var a providerKeys entry fills: its env, or <BACKEND>_API_KEY. */}}
{{- define "spillway.providerEnv" -}}
{{- .env | default (printf "%s_API_KEY" (.backend | upper | replace "-" "_" | replace "." "_")) -}}
{{- end -}}

{{/*
Every environment variable the router reads from a Secret, as a YAML list of
{env, secretName, key, from}: `from` names the value that asked for it (for messages).
*/}}
{{- define "spillway.secretEnv" -}}
{{- $out := list -}}
{{- range $i, $p := .Values.secrets.providerKeys -}}
{{- $out = append $out (dict "env" (include "spillway.providerEnv" $p) "secretName" $p.secretName "key" $p.key "from" (printf "secrets.providerKeys[%d]" $i)) -}}
{{- end -}}
{{- range $i, $c := .Values.secrets.clientKeys -}}
{{- $out = append $out (dict "env" $c.env "secretName" $c.secretName "key" $c.key "from" (printf "secrets.clientKeys[%d]" $i)) -}}
{{- end -}}
{{- with .Values.secrets.adminToken -}}
{{- $out = append $out (dict "env" "SPILLWAY_ADMIN_TOKEN" "secretName" .secretName "key" .key "from" "secrets.adminToken") -}}
{{- end -}}
{{- with .Values.ledger.postgresUrlSecret -}}
{{- $out = append $out (dict "env" "SPILLWAY_LEDGER_URL" "secretName" .secretName "key" .key "from" "ledger.postgresUrlSecret") -}}
{{- end -}}
{{- with .Values.redis.urlSecret -}}
{{- $out = append $out (dict "env" "SPILLWAY_REDIS_URL" "secretName" .secretName "key" .key "from" "redis.urlSecret") -}}
{{- end -}}
{{- toYaml (dict "items" $out) -}}
{{- end -}}

{{/*
Checks that the schema cannot express; each fails the render with the values to change.
Included by the ConfigMap, so every render runs them.
*/}}
{{- define "spillway.validate" -}}
{{- $v := .Values -}}
{{- $cfg := $v.config | default dict -}}
{{- if include "spillway.multiReplica" . -}}
{{- $missing := list -}}
{{- $ledgerOn := true -}}
{{- if and $cfg.ledger (hasKey $cfg.ledger "enabled") -}}{{- $ledgerOn = $cfg.ledger.enabled -}}{{- end -}}
{{- if and $ledgerOn (not $v.ledger.postgresUrlSecret) -}}
{{- $missing = append $missing "ledger.postgresUrlSecret (the shared cost ledger; or config.ledger.enabled: false)" -}}
{{- end -}}
{{- if not $v.redis.urlSecret -}}
{{- $missing = append $missing "redis.urlSecret (quota counters shared by the replicas)" -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "replicaCount > 1 or autoscaling.enabled needs %s: each replica would otherwise keep its own SQLite ledger and its own quota counters" (join " and " $missing)) -}}
{{- end -}}
{{- end -}}
{{- if and $v.autoscaling.enabled (gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) -}}
{{- fail (printf "autoscaling.minReplicas (%d) is above autoscaling.maxReplicas (%d)" (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) -}}
{{- end -}}
{{- $managed := dict
  "listen" "config.listen is set by the chart (0.0.0.0:<service.port>); set service.port instead"
  "client_keys_env" "config.client_keys_env is set by the chart; list the keys under secrets.clientKeys ({env, secretName, key})"
  "admin_token_env" "config.admin_token_env is set by the chart; set secrets.adminToken ({secretName, key})"
  "state" "config.state is set by the chart; set redis.urlSecret ({secretName, key}) for shared quota counters"
-}}
{{- range $key, $msg := $managed -}}
{{- if hasKey $cfg $key -}}{{- fail $msg -}}{{- end -}}
{{- end -}}
{{- if $cfg.ledger -}}
{{- if or (hasKey $cfg.ledger "url") (hasKey $cfg.ledger "url_env") -}}
{{- fail "config.ledger.url and config.ledger.url_env are set by the chart; set ledger.postgresUrlSecret ({secretName, key}) or ledger.sqlite.path" -}}
{{- end -}}
{{- end -}}
{{- if $cfg.limits -}}
{{- range $key, $value := dict "shutdown_delay_ms" "shutdownDelaySeconds" "drain_timeout_ms" "drainTimeoutSeconds" -}}
{{- if hasKey $cfg.limits $key -}}
{{- fail (printf "config.limits.%s is set by the chart; set %s instead" $key $value) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "invalid" $v.terminationGracePeriodSeconds) -}}
{{- $needed := add (int $v.shutdownDelaySeconds) (int $v.drainTimeoutSeconds) -}}
{{- if lt (int $v.terminationGracePeriodSeconds) (int $needed) -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) is below shutdownDelaySeconds + drainTimeoutSeconds (%d): the pod would be killed before it drained; raise it or leave it null to derive it" (int $v.terminationGracePeriodSeconds) (int $needed)) -}}
{{- end -}}
{{- end -}}
{{- $names := list -}}
{{- range $i, $b := $cfg.backends -}}
{{- $names = append $names $b.name -}}
{{- if hasKey $b "api_key_env" -}}
{{- fail (printf "config.backends[%d].api_key_env is set by the chart; add {backend: %s, secretName, key} to secrets.providerKeys instead" $i $b.name) -}}
{{- end -}}
{{- end -}}
{{- range $i, $p := $v.secrets.providerKeys -}}
{{- if not (has $p.backend $names) -}}
{{- fail (printf "secrets.providerKeys[%d].backend: no backend in config.backends is named %q" $i $p.backend) -}}
{{- end -}}
{{- end -}}
{{- if $v.fleetAutoscaling.enabled -}}
{{- $a := $v.fleetAutoscaling -}}
{{- $pool := dict -}}
{{- range $cfg.backends -}}{{- if eq .name $a.pool -}}{{- $pool = . -}}{{- end -}}{{- end -}}
{{- if not $pool -}}
{{- fail (printf "fleetAutoscaling.pool: no backend in config.backends is named %q" $a.pool) -}}
{{- end -}}
{{- if not (has $pool.kind (list "local" "vllm")) -}}
{{- fail (printf "fleetAutoscaling.pool: backend %q is of kind %s; only a local pool (kind local or vllm) has engines to scale" $a.pool $pool.kind) -}}
{{- end -}}
{{- if gt (int $a.minReplicas) (int $a.maxReplicas) -}}
{{- fail (printf "fleetAutoscaling.minReplicas (%d) is above fleetAutoscaling.maxReplicas (%d)" (int $a.minReplicas) (int $a.maxReplicas)) -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range (include "spillway.secretEnv" . | fromYaml).items -}}
{{- if not (regexMatch "^[A-Za-z_][A-Za-z0-9_]*$" .env) -}}
{{- fail (printf "%s: %q is not an environment variable name (set env)" .from .env) -}}
{{- end -}}
{{- if hasKey $seen .env -}}
{{- fail (printf "%s: environment variable %s is already used by %s" .from .env (get $seen .env)) -}}
{{- end -}}
{{- $_ := set $seen .env .from -}}
{{- end -}}
{{- end -}}

{{/* The pod's grace period: terminationGracePeriodSeconds, else the shutdown delay, the drain
timeout and 5 s for the ledger flush. */}}
{{- define "spillway.terminationGracePeriodSeconds" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add (int .Values.shutdownDelaySeconds) (int .Values.drainTimeoutSeconds) 5 -}}
{{- else -}}
{{- int .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* The Spillway config as written to the ConfigMap: .Values.config plus the chart-managed keys. */}}
{{- define "spillway.config" -}}
{{- $v := .Values -}}
{{- $cfg := deepCopy ($v.config | default dict) -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int $v.service.port)) -}}
{{- $clients := list -}}
{{- range $v.secrets.clientKeys -}}{{- $clients = append $clients .env -}}{{- end -}}
{{- if $clients -}}{{- $_ := set $cfg "client_keys_env" $clients -}}{{- end -}}
{{- if $v.secrets.adminToken -}}{{- $_ := set $cfg "admin_token_env" "SPILLWAY_ADMIN_TOKEN" -}}{{- end -}}
{{- if $v.redis.urlSecret -}}{{- $_ := set $cfg "state" (dict "redis_url_env" "SPILLWAY_REDIS_URL") -}}{{- end -}}
{{- $ledger := $cfg.ledger | default dict -}}
{{- if $v.ledger.postgresUrlSecret -}}
{{- $_ := set $ledger "url_env" "SPILLWAY_LEDGER_URL" -}}
{{- else -}}
{{- $_ := set $ledger "url" (printf "sqlite://%s" $v.ledger.sqlite.path) -}}
{{- end -}}
{{- $_ := set $cfg "ledger" $ledger -}}
{{- $limits := $cfg.limits | default dict -}}
{{- $_ := set $limits "shutdown_delay_ms" (mul (int $v.shutdownDelaySeconds) 1000) -}}
{{- $_ := set $limits "drain_timeout_ms" (mul (int $v.drainTimeoutSeconds) 1000) -}}
{{- $_ := set $cfg "limits" $limits -}}
{{- $namespace := $v.discovery.namespace | default .Release.Namespace -}}
{{- range $b := $cfg.backends -}}
{{- range $v.secrets.providerKeys -}}
{{- if eq .backend $b.name -}}{{- $_ := set $b "api_key_env" (include "spillway.providerEnv" .) -}}{{- end -}}
{{- end -}}
{{- if and $b.discovery $b.discovery.kubernetes -}}
{{- if not $b.discovery.kubernetes.namespace -}}
{{- $_ := set $b.discovery.kubernetes "namespace" $namespace -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The namespaces Kubernetes discovery watches (one Role each), as {items: [...]}. */}}
{{- define "spillway.discoveryNamespaces" -}}
{{- $cfg := include "spillway.config" . | fromYaml -}}
{{- $out := list -}}
{{- range $cfg.backends -}}
{{- if and .discovery .discovery.kubernetes -}}
{{- $out = append $out .discovery.kubernetes.namespace -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "items" ($out | uniq | sortAlpha)) -}}
{{- end -}}

{{/* Where the engines that fleetAutoscaling scales run: fleetAutoscaling.workload.namespace,
else discovery.namespace, else the release namespace. */}}
{{- define "spillway.fleetNamespace" -}}
{{- .Values.fleetAutoscaling.workload.namespace | default .Values.discovery.namespace | default .Release.Namespace -}}
{{- end -}}

{{/*
The demand on fleetAutoscaling.pool in prompt tokens per second, summed over the router
replicas: what its engines served (spillway_tokens_total, kind input), what it spilled
(spillway_pool_spilled_tokens_per_second) and what waits for it (spillway_queue_tokens, to be
served within queueDrainSeconds). Each term is 0 while it has no series. The query value,
when set, replaces it.
*/}}
{{- define "spillway.fleetDemand" -}}
{{- $a := .Values.fleetAutoscaling -}}
{{- if $a.query -}}
{{- $a.query -}}
{{- else -}}
{{- $m := printf "backend=%s" ($a.pool | quote) -}}
{{- range $k, $v := $a.prometheus.seriesLabels -}}{{- $m = printf "%s,%s=%s" $m $k ($v | quote) -}}{{- end -}}
{{- printf "(sum(rate(spillway_tokens_total{%s,kind=\"input\"}[%s])) or vector(0)) + (sum(spillway_pool_spilled_tokens_per_second{%s}) or vector(0)) + (sum(spillway_queue_tokens{%s}) or vector(0)) / %d" $m $a.servedRateWindow $m $m (int $a.queueDrainSeconds) -}}
{{- end -}}
{{- end -}}
