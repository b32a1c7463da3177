{{/*
The alerting rules, thresholds and durations from .Values.prometheusRule.rules.
deploy/prometheus/capwatch-rules.yml is this template rendered with the default values
(tests/deploy checks that the two agree, and promtool checks and unit-tests that file).
Prometheus' own templates in annotations go through capwatch.prom, so Helm leaves them be.
Names never repeat an alertname the daemon pushes to Alertmanager itself
(CapwatchCapabilityReduced, CapwatchEffectDistributionDrift, CapwatchAssessmentFailed, ...):
these rules watch aggregates and the daemon, the daemon reports each agent's change.
*/}}
{{- define "capwatch.prom" -}}{{ printf "{{ %s }}" . }}{{- end -}}

{{- define "capwatch.rules" -}}
{{- $r := .Values.prometheusRule.rules -}}
{{- $rb := .Values.prometheusRule.runbookUrl -}}
groups:
  - name: capwatch.fleet
    rules:
      - alert: CapwatchInconsistencyRateHigh
        expr: |
          (
            sum by (family, action) (rate(capwatch_transitions_total{verdict="inconsistent"}[10m]))
            /
            sum by (family, action) (rate(capwatch_transitions_total[10m]))
          ) > {{ $r.inconsistencyRateHigh.ratio }}
        for: {{ $r.inconsistencyRateHigh.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ include "capwatch.prom" "$labels.action" }} in family {{ include "capwatch.prom" "$labels.family" }}: {{ include "capwatch.prom" "$value | humanizePercentage" }} of transitions contradict the model"
          description: "More than {{ printf "%.4g" (mulf $r.inconsistencyRateHigh.ratio 100) }}% of observed {{ include "capwatch.prom" "$labels.action" }} transitions have been inconsistent with the deployed model for {{ $r.inconsistencyRateHigh.for }}: agents of {{ include "capwatch.prom" "$labels.family" }} behave differently than their models say, and assessments are not catching up."
          runbook_url: "{{ $rb }}#capwatchinconsistencyratehigh"
      - alert: CapwatchDriftAlarmsFrequent
        expr: sum by (family, action) (increase(capwatch_drift_alarms_total[{{ $r.driftAlarmsFrequent.window }}])) >= {{ $r.driftAlarmsFrequent.alarms }}
        for: {{ $r.driftAlarmsFrequent.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ include "capwatch.prom" "$labels.action" }} in family {{ include "capwatch.prom" "$labels.family" }}: {{ include "capwatch.prom" "$value | humanize" }} drift alarms in {{ $r.driftAlarmsFrequent.window }}"
          description: "Effect-frequency tests of {{ include "capwatch.prom" "$labels.action" }} failed at least {{ $r.driftAlarmsFrequent.alarms }} times in {{ $r.driftAlarmsFrequent.window }} across the family: a fleet-wide change rather than one agent (each agent's drift is its own CapwatchEffectDistributionDrift alert from the daemon)."
          runbook_url: "{{ $rb }}#capwatchdriftalarmsfrequent"
      - alert: CapwatchModelDriftedFromBaseline
        expr: max by (family) (capwatch_model_delta_from_baseline) >= {{ $r.modelDriftedFromBaseline.palTuples }}
        for: {{ $r.modelDriftedFromBaseline.for }}
        labels:
          severity: info
        annotations:
          summary: "family {{ include "capwatch.prom" "$labels.family" }}: an agent's model differs from the baseline in {{ include "capwatch.prom" "$value" }} pal-tuples"
          description: "Re-assessment changed at least one agent's model by {{ $r.modelDriftedFromBaseline.palTuples }} or more pal-tuples from its family baseline; see `capwatch models list` and `capwatch models history`."
          runbook_url: "{{ $rb }}#capwatchmodeldriftedfrombaseline"
  - name: capwatch.daemon
    rules:
      - alert: CapwatchAssessmentFailureRateHigh
        expr: |
          (
            sum by (family) (increase(capwatch_assessments_total{result="failed"}[{{ $r.assessmentFailureRateHigh.window }}]))
            /
            sum by (family) (increase(capwatch_assessments_total{result!="retry"}[{{ $r.assessmentFailureRateHigh.window }}]))
          ) > {{ $r.assessmentFailureRateHigh.ratio }}
        for: {{ $r.assessmentFailureRateHigh.for }}
        labels:
          severity: warning
        annotations:
          summary: "family {{ include "capwatch.prom" "$labels.family" }}: {{ include "capwatch.prom" "$value | humanizePercentage" }} of assessments failed in {{ $r.assessmentFailureRateHigh.window }}"
          description: "Most finished assessments of the family fail (retries not counted) (more than {{ printf "%.4g" (mulf $r.assessmentFailureRateHigh.ratio 100) }}%): a systemic cause such as agents unreachable, rejected credentials or an exhausted query budget, not one agent (that is the daemon's CapwatchAssessmentFailed alert). Models of the family may be stale."
          runbook_url: "{{ $rb }}#capwatchassessmentfailureratehigh"
      - alert: CapwatchAssessmentSlow
        expr: |
          histogram_quantile(0.9,
            sum by (family, le) (rate(capwatch_assessment_duration_seconds_bucket[30m]))
          ) > {{ $r.assessmentSlow.p90Seconds }}
        for: {{ $r.assessmentSlow.for }}
        labels:
          severity: warning
        annotations:
          summary: "family {{ include "capwatch.prom" "$labels.family" }}: 90th percentile assessment time is {{ include "capwatch.prom" "$value | humanizeDuration" }}"
          description: "Assessments take longer than {{ $r.assessmentSlow.p90Seconds }} s; drift is reported late."
          runbook_url: "{{ $rb }}#capwatchassessmentslow"
      - alert: CapwatchConsumerLagHigh
        expr: max by (partition) (capwatch_consumer_lag) > {{ $r.consumerLagHigh.records }}
        for: {{ $r.consumerLagHigh.for }}
        labels:
          severity: warning
        annotations:
          summary: "partition {{ include "capwatch.prom" "$labels.partition" }} is {{ include "capwatch.prom" "$value" }} records behind"
          description: "capwatch is not keeping up with the transition stream; add replicas or partitions."
          runbook_url: "{{ $rb }}#capwatchconsumerlaghigh"
      - alert: CapwatchDeadLettersHigh
        expr: sum by (reason) (increase(capwatch_dead_letters_total[{{ $r.deadLettersHigh.window }}])) > {{ $r.deadLettersHigh.messages }}
        for: {{ $r.deadLettersHigh.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ include "capwatch.prom" "$value | humanize" }} messages dead-lettered in {{ $r.deadLettersHigh.window }} ({{ include "capwatch.prom" "$labels.reason" }})"
          description: "Producers send events capwatch cannot decode; see the dead-letter topic for the original bytes and reasons."
          runbook_url: "{{ $rb }}#capwatchdeadlettershigh"
      - alert: CapwatchAgentFamilyMoves
        # Not increase(): a series of these labels is born at 1 (the first move), and
        # increase() over a series' first sample is 0, so the first move never fired.
        # Nor the difference alone: a restarted daemon's series starts again at 1, below
        # what it read a window before, and a move after a restart went unseen for the
        # window. So: the growth over the window; after a reset within it, or a restart of
        # the process within it (its start time changed: the new process may count back up
        # to the old value, no drop for resets() to see), what the new process counted (a
        # lower bound); a series born within it, all it counted.
        # The reset and the restart are looked for over the window and over the window
        # 5m before (Prometheus's lookback): an hour after a restart the offset may still
        # find the old process's last sample, as high as the new count, while the restart
        # has left the window, and a move soon after the restart was missed for up to 5m
        # at the window's edge (promtool test; session 20). Now such a move may fire up to
        # 5m longer than the window, never less.
        expr: |
          sum by (family, previous_family) (
            (capwatch_agent_family_moves_total - capwatch_agent_family_moves_total offset {{ $r.agentFamilyMoves.window }}) > 0
            or (capwatch_agent_family_moves_total and (resets(capwatch_agent_family_moves_total[{{ $r.agentFamilyMoves.window }}]) > 0 or resets(capwatch_agent_family_moves_total[{{ $r.agentFamilyMoves.window }}] offset 5m) > 0))
            or (capwatch_agent_family_moves_total and on(job, instance) (changes(process_start_time_seconds[{{ $r.agentFamilyMoves.window }}]) > 0 or changes(process_start_time_seconds[{{ $r.agentFamilyMoves.window }}] offset 5m) > 0))
            or (capwatch_agent_family_moves_total unless capwatch_agent_family_moves_total offset {{ $r.agentFamilyMoves.window }})
          ) > 0
        for: {{ $r.agentFamilyMoves.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ include "capwatch.prom" "$value | humanize" }} agent moves from family {{ include "capwatch.prom" "$labels.previous_family" }} to {{ include "capwatch.prom" "$labels.family" }} in {{ $r.agentFamilyMoves.window }}"
          description: "Records named another family than the one their agents were watched under; each moved its agent to that family's model and set aside the drift statistics it had gathered. Expected once per agent when a fleet is redeployed under a new family; otherwise a producer names the wrong family (the daemon's log names each agent and offset)."
          runbook_url: "{{ $rb }}#capwatchagentfamilymoves"
      - alert: CapwatchAlertDeliveryFailing
        expr: sum by (sink) (increase(capwatch_alert_delivery_failures_total[{{ $r.alertDeliveryFailing.window }}])) > 0
        for: {{ $r.alertDeliveryFailing.for }}
        labels:
          severity: warning
        annotations:
          summary: "capwatch has been failing to deliver alerts to {{ include "capwatch.prom" "$labels.sink" }} for {{ $r.alertDeliveryFailing.for }}"
          description: "Deliveries to the {{ include "capwatch.prom" "$labels.sink" }} sink keep failing (a single failure is retried and does not fire this); the alerts wait in the outbox, other sinks still receive them."
          runbook_url: "{{ $rb }}#capwatchalertdeliveryfailing"
      - alert: CapwatchNoRecords
        expr: |
          (sum(increase(capwatch_records_total[{{ $r.noRecords.window }}])) or vector(0)) == 0
          and on () count(capwatch_build_info) > 0
        for: {{ $r.noRecords.for }}
        labels:
          severity: warning
        annotations:
          summary: "capwatch has read no records for {{ $r.noRecords.window }}"
          description: "The daemon runs but no transition has arrived: producers stopped, the topic or the consumer group is wrong, or the broker refuses the daemon. Nothing is being monitored."
          runbook_url: "{{ $rb }}#capwatchnorecords"
      - alert: CapwatchStoreWritesFailing
        expr: count by (kind) (capwatch_store_writes_failing == 1)
        for: {{ $r.storeWritesFailing.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ include "capwatch.prom" "$value" }} capwatch replica(s) cannot write {{ include "capwatch.prom" "$labels.kind" }} to the models store"
          description: "The models store has refused this kind of write (a full disk, a revoked privilege, a read-only server) and the retries have kept failing for {{ $r.storeWritesFailing.for }}; those replicas answer /readyz 503. With kind model_versions, learned models are not published (nothing half written: the work waits for a retry)."
          runbook_url: "{{ $rb }}#capwatchstorewritesfailing"
      - alert: CapwatchKafkaPartitionFailing
        expr: sum(capwatch_kafka_partitions_failing) > 0
        for: {{ $r.kafkaPartitionFailing.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ include "capwatch.prom" "$value" }} Kafka partition(s) of the transitions topic keep failing to be read"
          description: "Some replica's fetches of a partition have failed again and again for {{ $r.kafkaPartitionFailing.for }} with no record of it handed out (a batch corrupt in the log, one the client cannot decompress): its records after the failure are not monitored, the other partitions are. /readyz names the partition and the error."
          runbook_url: "{{ $rb }}#capwatchkafkapartitionfailing"
      - alert: CapwatchAbsent
        expr: absent(capwatch_build_info)
        for: {{ $r.absent.for }}
        labels:
          severity: critical
        annotations:
          summary: "no capwatch replica is being scraped"
          description: "Prometheus has seen no capwatch_build_info series for {{ $r.absent.for }}: the daemon is down or not scraped."
          runbook_url: "{{ $rb }}#capwatchabsent"
{{- end -}}
