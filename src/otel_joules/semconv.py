"""The telemetry vocabulary of otel-joules, defined once: every name a user or backend sees.

Span attributes, span and event names, metric names and metric attributes, and the values
of ``energy.source`` are a contract with users, dashboards and the Collector config: they
are defined here and nowhere else, and every module imports them from here under these
names (no ``import ... as`` aliases), so a reader finds where a name is born with one
search. The README's attribute tables are checked against this module by a test.

This module imports nothing from otel-joules, so every layer may use it. Names the
OpenTelemetry semantic conventions already define (``process.*``, ``host.name``,
``service.name``) come from ``opentelemetry.semconv``; the hardware conventions (``hw.*``)
are written here because the lowest supported ``opentelemetry-semantic-conventions``
(0.48b0) lacks them.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes.host_attributes import HOST_ID, HOST_NAME
from opentelemetry.semconv._incubating.attributes.process_attributes import (
    PROCESS_COMMAND_LINE,
    PROCESS_EXECUTABLE_NAME,
    PROCESS_EXIT_CODE,
    PROCESS_PID,
)
from opentelemetry.semconv._incubating.attributes.service_attributes import SERVICE_INSTANCE_ID
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME

# --- Namespaces, and which of them the file exporters keep ------------------------------------

#: ``energy.joules``, ``energy.<domain>.joules``, ``energy.attributed.*``, ...
ENERGY_NAMESPACE: Final = "energy."
#: ``energy.attributed.joules``, ``energy.attributed.self.joules``, ...: the span's share.
ENERGY_ATTRIBUTED_NAMESPACE: Final = "energy.attributed."
#: ``carbon.intensity.gco2eq_per_kwh``, ``carbon.pue``, ...
CARBON_NAMESPACE: Final = "carbon."
#: ``training.epoch.number``, ``training.epochs.planned``, ... (training runs)
TRAINING_NAMESPACE: Final = "training."
#: Span attributes whose key starts with one of these are written by every file exporter
#: (CSV, JSON Lines, MongoDB, DataFrame): the one place that says which. ``training.`` is
#: here so an epoch span keeps its ``training.epoch.number`` in exports.
EXPORTED_ATTRIBUTE_PREFIXES: Final[tuple[str, ...]] = (ENERGY_NAMESPACE, CARBON_NAMESPACE, TRAINING_NAMESPACE)
#: Resource attributes every file exporter keeps beside the span's own (their ``resource`` field), so
#: ``otel-joules report --by host,user,job`` groups CSV, JSON-lines and Parquet exports as it does OTLP/JSON:
#: who ran the work, where, as which job. Identities only: a resource's other attributes (command lines,
#: environments) can be large or secret and reach the OTLP backend only.
EXPORTED_RESOURCE_ATTRIBUTES: Final[tuple[str, ...]] = (
    HOST_NAME,
    HOST_ID,
    "process.owner",
    "user.name",
    SERVICE_INSTANCE_ID,
    "service.namespace",
    "service.version",
    "deployment.environment",
    "deployment.environment.name",
)
#: Resource attributes kept by prefix as well: otel-joules' job detector's (:mod:`otel_joules.delivery.resource`).
EXPORTED_RESOURCE_PREFIXES: Final[tuple[str, ...]] = ("slurm.", "torchrun.")

# --- Span attributes: energy during the span (what the host's measured domains spent) --------

#: Total joules of the host's measured domains during the span, without double counting (double).
ENERGY_JOULES: Final = "energy.joules"
#: Average power over the span (double).
ENERGY_WATTS: Final = "energy.watts"
#: ``measured``, ``estimate``, ``mixed`` or ``partial`` (:data:`SOURCE_MEASURED`, ...), on spans and metric points.
ENERGY_SOURCE: Final = "energy.source"
#: True when the span is shorter than a counter's update period (the value is quantised).
ENERGY_BELOW_RESOLUTION: Final = "energy.below_resolution"
#: Why a span with explicit start/end times has no ``energy.joules``.
ENERGY_UNAVAILABLE_REASON: Final = "energy.unavailable_reason"
#: Seconds the wall clock stepped during the span (``date -s``, an NTP step, a VM resume), when more than 2 ms
#: either way: its start and end times are off by it; its measured duration is ``end - start - this``.
ENERGY_CLOCK_STEP_S: Final = "energy.clock_step_s"
#: Seconds of the span estimated because ``otel-joules agent`` was away for them (``energy.source = partial``):
#: the rest of the span is measured. Absent when no part was estimated so.
ENERGY_ESTIMATED_S: Final = "energy.estimated_s"
#: The low end of ``energy.joules``'s uncertainty band where a domain in it is estimated (double): measured domains
#: count as read, each estimated one at the low end of its model's band (docs/estimates.md).
ENERGY_ESTIMATE_LOW_JOULES: Final = "energy.estimate.low.joules"
#: The high end of the same band (double).
ENERGY_ESTIMATE_HIGH_JOULES: Final = "energy.estimate.high.joules"
#: The models behind the estimated domains, space-separated, sorted (``ccf:cascade_lake memory:0.375_w_per_gb``):
#: ``ccf:<architecture|family|provider>`` (Cloud Carbon Footprint's per-vCPU watts), ``tdp:<architecture>``
#: (TDP-style, bare metal), ``memory:<W/GB>_w_per_gb``. On spans with an estimate, and on ``energy.estimate`` points.
ENERGY_ESTIMATE_SOURCE: Final = "energy.estimate.source"
#: How a domain's joules were obtained, on metric points (``counter``, ``power_integration``, ``estimate``).
ENERGY_METHOD: Final = "energy.method"
#: kWh, where a layer reports facility energy in kWh (training-run prediction events).
ENERGY_KWH: Final = "energy.kwh"
#: The domains of the span read through the ``otel-joules agent`` (string array, sorted), because this user
#: cannot read ``energy_uj``: still measured (``energy.source = measured``); absent when none was.
ENERGY_AGENT_DOMAINS: Final = "energy.agent.domains"
#: Span attribute: the meter's domains that add to ``energy.joules``, each with its kind, a string array of
#: ``domain_id:kind`` (``["package_0:cpu", "dram_0:memory", "nvidia_gpu_0:gpu"]``), so a reader of an export
#: classifies domains without knowing their ids. Older exports carry one space-separated string
#: (``package_0:cpu dram_0:memory``): readers accept both.
ENERGY_DOMAIN_KINDS: Final = "energy.domain_kinds"
#: Span attribute: the whole-platform reading beside the components the span counts (the broadest of them, as its
#: sensor says: a BMC's, an ACPI power meter's, psys), by domain id: its ``energy.<domain>.joules`` is what the box
#: drew during the span, beside ``energy.joules``. Absent where there is none, or where the platform reading is
#: itself the total (then ``energy.domain_kinds`` lists it).
ENERGY_PLATFORM_DOMAIN: Final = "energy.platform.domain"


def domain_joules_key(domain_id: str) -> str:
    """``energy.<domain>.joules``: one domain's joules during the span, e.g. ``energy.package_0.joules``."""
    return f"energy.{domain_id}.joules"


def domain_method_key(domain_id: str) -> str:
    """``energy.<domain>.method``: ``power_integration`` or ``estimate`` for a domain not read from a counter."""
    return f"energy.{domain_id}.method"


def domain_stale_key(domain_id: str) -> str:
    """``energy.<domain>.stale``: true when a device (NVML) did not answer in time at the span's start or end."""
    return f"energy.{domain_id}.stale"


def domain_missing_key(domain_id: str) -> str:
    """``energy.<domain>.missing``: true when the domain's counter failed a read at the span's start or end and
    was being retried: the span's figures leave that domain out (``energy.source`` is ``partial`` when it adds
    to ``energy.joules``)."""
    return f"energy.{domain_id}.missing"


def domain_rejected_jump_key(domain_id: str) -> str:
    """``energy.<domain>.rejected_jump``: true when the domain's counter moved during the span by more than its
    power bound allows in the time between two reads: that move was not counted as energy."""
    return f"energy.{domain_id}.rejected_jump"


# --- Span attributes: the span's share (what adds up; otel_joules.attribution) --------------

#: The span's share of the host's energy, inclusive of its children (double).
ENERGY_ATTRIBUTED_JOULES: Final = "energy.attributed.joules"
#: The same minus what its instrumented children were attributed: what sums add up.
ENERGY_ATTRIBUTED_SELF_JOULES: Final = "energy.attributed.self.joules"
#: Inclusive share of the CPU-side domains (with the platform's energy beyond the components, where a whole-platform
#: reading is read beside them: :mod:`otel_joules.attribution.uncovered`).
ENERGY_ATTRIBUTED_CPU_JOULES: Final = "energy.attributed.cpu.joules"
#: Inclusive share of the memory domains.
ENERGY_ATTRIBUTED_MEMORY_JOULES: Final = "energy.attributed.memory.joules"
#: Inclusive share of the GPUs.
ENERGY_ATTRIBUTED_GPU_JOULES: Final = "energy.attributed.gpu.joules"
#: The model that produced the share (:data:`ATTRIBUTION_CPU_TIME_SHARE`).
ENERGY_ATTRIBUTION: Final = "energy.attribution"
#: ``energy.attribution``'s model: CPU time shares of the host, NVML process shares of GPUs. The value is
#: ``<model>/<policy>`` (``cpu_time_share/capacity``; the policies: ``config.ATTRIBUTION_POLICIES``).
ATTRIBUTION_CPU_TIME_SHARE: Final = "cpu_time_share"
#: The span's share of the host's dynamic energy (above the domains' baselines), inclusive of its children (double).
ENERGY_ATTRIBUTED_DYNAMIC_JOULES: Final = "energy.attributed.dynamic.joules"
#: The same minus what its instrumented children were attributed.
ENERGY_ATTRIBUTED_DYNAMIC_SELF_JOULES: Final = "energy.attributed.dynamic.self.joules"
#: Where the static/dynamic split's baseline came from (:data:`BASELINE_LEARNED`, :data:`BASELINE_CONFIGURED`,
#: :data:`BASELINE_UNKNOWN`), on spans with a share and on ``energy.baseline.power`` points.
ENERGY_BASELINE: Final = "energy.baseline"
#: ``energy.baseline``: fitted from the history (power against busy cores).
BASELINE_LEARNED: Final = "learned"
#: ``energy.baseline``: stated by ``OTEL_JOULES_STATIC_WATTS`` or ``instrument(static_watts=...)``.
BASELINE_CONFIGURED: Final = "configured"
#: ``energy.baseline``: not learned yet: the lowest 1 s average power in the history stands in (an upper bound).
BASELINE_UNKNOWN: Final = "unknown"

# --- Span attributes: carbon, where a layer knows the intensity ------------------------------

#: gCO2eq of ``energy.joules`` (PUE applied).
ENERGY_CO2EQ_GRAMS: Final = "energy.co2eq.grams"
#: gCO2eq of ``energy.attributed.joules``.
ENERGY_ATTRIBUTED_CO2EQ_GRAMS: Final = "energy.attributed.co2eq.grams"
#: gCO2eq of ``energy.attributed.self.joules``: what dashboards and the ``sum`` connector add up.
ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS: Final = "energy.attributed.self.co2eq.grams"
#: The grid carbon intensity used, gCO2eq/kWh.
CARBON_INTENSITY_GCO2EQ_PER_KWH: Final = "carbon.intensity.gco2eq_per_kwh"
#: Where it came from (``explicit``, ``offline``, ``world_average``, a live provider's name).
CARBON_INTENSITY_SOURCE: Final = "carbon.intensity.source"
#: The data-centre PUE applied.
CARBON_PUE: Final = "carbon.pue"

# --- Training runs (CarbonTracker API, otel_joules.training) ---------------------------------

#: Root span of a training run.
SPAN_TRAINING: Final = "training"
#: One span per epoch, child of the training span.
SPAN_EPOCH: Final = "epoch"
#: Event on the training span with the predicted cost of the whole run.
EVENT_TRAINING_PREDICTION: Final = "training.prediction"
#: The epoch's number, from 1 (on epoch spans): a number, not an index from 0, as CarbonTracker's ``Epoch 1:``.
TRAINING_EPOCH_NUMBER: Final = "training.epoch.number"
#: True on an epoch span ended by stop() or an error before epoch_end().
TRAINING_EPOCH_INTERRUPTED: Final = "training.epoch.interrupted"
#: How many epochs the figures beside it are of: completed (training span) or predicted (prediction event).
TRAINING_EPOCHS_COUNT: Final = "training.epochs.count"
#: Epochs the run was planned for (``CarbonTracker(epochs=...)``).
TRAINING_EPOCHS_PLANNED: Final = "training.epochs.planned"
#: True when the run stopped before its planned epochs.
TRAINING_EARLY_STOP: Final = "training.early_stop"
#: Seconds, on the prediction event.
TRAINING_DURATION_S: Final = "training.duration_s"
#: A sampled training step, child of its epoch span (the callbacks' ``step_spans``).
SPAN_STEP: Final = "step"
#: The step's number: the trainer's global step, from 1 (on step spans).
TRAINING_STEP: Final = "training.step"
#: The process's global rank in a multi-rank job (``RANK``, else ``SLURM_PROCID``), on the callbacks' spans.
TRAINING_RANK: Final = "training.rank"
#: The process's rank on its host (``LOCAL_RANK``, else ``SLURM_LOCALID``).
TRAINING_LOCAL_RANK: Final = "training.local_rank"
#: The number of ranks of the job (``WORLD_SIZE``, else ``SLURM_NTASKS``).
TRAINING_WORLD_SIZE: Final = "training.world_size"

# --- Metrics ---------------------------------------------------------------------------------

#: Counter, J: measured energy of one top-level device (a RAPL package, a DRAM zone, a GPU). No two series
#: overlap, so ``sum by (hw_type)`` counts each joule once: sub-zones are :data:`METRIC_ENERGY_NESTED`, whole-platform
#: readings :data:`METRIC_HW_HOST_ENERGY`, estimates :data:`METRIC_ENERGY_ESTIMATE`.
METRIC_HW_ENERGY: Final = "hw.energy"
#: Gauge, W: power of one ``hw.energy`` device.
METRIC_HW_POWER: Final = "hw.power"
#: Counter, J: energy of the entire physical host, from a whole-platform meter (RAPL psys, a platform power
#: meter); absent where the host has none (:data:`METRIC_ENERGY_COMPONENTS` is then the nearest figure).
METRIC_HW_HOST_ENERGY: Final = "hw.host.energy"
#: Gauge, W: power of the entire physical host, from the same meter.
METRIC_HW_HOST_POWER: Final = "hw.host.power"
#: Counter, J: the sum of the host's ``hw.energy`` series (packages + DRAM + GPUs), measured only. Not the
#: host (fans, disks, the PSU's losses are not in it): hence not ``hw.host.energy``. Not a convention's name.
METRIC_ENERGY_COMPONENTS: Final = "energy.components"
#: Gauge, W: the same as power (``power.*`` beside ``energy.*``, as no metric name is also a namespace).
METRIC_ENERGY_COMPONENTS_POWER: Final = "power.components"
#: Counter, J: a measured reading that lies inside another series (a RAPL core or uncore zone inside its package,
#: ``hw.parent``; a second whole-platform meter inside the host): kept out of ``hw.energy`` so its plain sum
#: counts each joule once. Not a convention's name.
METRIC_ENERGY_NESTED: Final = "energy.nested"
#: Gauge, W: the same as power.
METRIC_ENERGY_NESTED_POWER: Final = "power.nested"
#: Counter, J: a modelled domain's energy (CPU time x per-CPU watts, memory size x W/GB): never in a measured series. Not a
#: convention's name.
METRIC_ENERGY_ESTIMATE: Final = "energy.estimate"
#: Gauge, W: the same as power.
METRIC_ENERGY_ESTIMATE_POWER: Final = "power.estimate"
#: Counter, s: per domain, the seconds during which its counter failed reads and was being retried: the power
#: series over that time leave the domain out (the energy counters hold its last known joules). Labels never
#: change for it. Not a convention's name.
METRIC_ENERGY_MISSING: Final = "energy.missing"
#: Counter, J: the part of the host's energy (``hw.host.energy``, a whole-platform meter: a BMC, an ACPI power meter,
#: psys) that its component counters do not cover (``hw.host.energy`` minus ``energy.components``: fans, disks, the
#: board, the supplies' losses), per host; never going back. Published only where a platform meter exists. Not a
#: convention's name.
METRIC_ENERGY_UNCOVERED: Final = "energy.uncovered"
#: Gauge, 1: the components' share of the platform's energy (``energy.components`` / ``hw.host.energy``) since the
#: publisher started, per host. Not a convention's name.
METRIC_ENERGY_COVERAGE: Final = "energy.coverage"
#: Counter, J: this process's share of the host's energy, per ``hw.type`` (``cpu`` carries its share of a platform
#: meter's energy beyond the components, where one is read beside them: :mod:`otel_joules.attribution.uncovered`).
METRIC_PROCESS_ENERGY: Final = "process.energy"
#: Gauge, W: this process's share of the host's power, per ``hw.type``.
METRIC_PROCESS_POWER: Final = "process.power"
#: Counter, J: the host's energy the attribution model gives to no process (idle capacity's static energy,
#: idle periods), per ``hw.type`` (``cpu``, ``memory``), with the host's ``hw.id``. Every process on a host
#: reports the same host figure: take one per host (``max`` of the rates by ``hw.id``), never a sum.
METRIC_ENERGY_UNATTRIBUTED: Final = "energy.unattributed"
#: Gauge, W: each domain's static baseline (:data:`METRIC_ENERGY_BASELINE_STATE` says where it came from).
METRIC_ENERGY_BASELINE_POWER: Final = "energy.baseline.power"
#: Gauge, 1: per domain and ``energy.baseline`` value (learned, configured, unknown), 1 for where the domain's baseline
#: comes from now and 0 for the others: the state changes a value, never a series' labels (as ``hw.status`` does).
METRIC_ENERGY_BASELINE_STATE: Final = "energy.baseline.state"

#: Metric attribute: the device's id (a RAPL zone path, a GPU UUID, the host name).
HW_ID: Final = "hw.id"
#: Metric attribute: the device's human name.
HW_NAME: Final = "hw.name"
#: Metric attribute: ``cpu``, ``memory``, ``gpu``; ``enclosure`` for a whole-platform meter (on ``energy.missing``
#: and ``energy.nested``; the host's own is ``hw.host.*``).
HW_TYPE: Final = "hw.type"
#: Metric attribute: the ``hw.id`` of the device that contains this one (a package's core zone).
HW_PARENT: Final = "hw.parent"
#: Metric attribute: the device's manufacturer (``AMD``, ``NVIDIA``), where the sensor knows it.
HW_VENDOR: Final = "hw.vendor"
#: ``hw.vendor``'s value on AMD GPUs (read through amdsmi).
VENDOR_AMD: Final = "AMD"
#: ``hw.vendor``'s value on NVIDIA GPUs (read through NVML).
VENDOR_NVIDIA: Final = "NVIDIA"
#: Metric attribute: the domain id (``package_0``, ``psys``, ``nvidia_gpu_0``), the key a span's
#: ``energy.<domain>.joules`` uses: it joins a span's domain to its metric series on the same host.
ENERGY_DOMAIN: Final = "energy.domain"

# --- Values ----------------------------------------------------------------------------------

#: ``energy.source``: every value read from hardware counters (or integrated hardware power).
SOURCE_MEASURED: Final = "measured"
#: ``energy.source``: every value modelled (CPU time x per-CPU watts), not measured.
SOURCE_ESTIMATE: Final = "estimate"
#: ``energy.source``: some domains measured, some estimated.
SOURCE_MIXED: Final = "mixed"
#: ``energy.source``: a domain that adds to ``energy.joules`` could not be read at the span's start or end
#: (``energy.<domain>.missing``): the total leaves it out and is low. Takes precedence over the three above;
#: the domains present say how they were obtained (``energy.<domain>.method``).
SOURCE_PARTIAL: Final = "partial"

#: A domain's kind (``Domain.kind``, in ``energy.domain_kinds``); cpu, memory and gpu are also the attribution
#: kinds, each with an ``energy.attributed.<kind>.joules``, and the ``hw.type`` of their domains.
KIND_CPU: Final = "cpu"
KIND_MEMORY: Final = "memory"
KIND_GPU: Final = "gpu"
#: A domain's kind: the whole platform (RAPL psys); its ``hw.type`` is ``enclosure``, its attribution kind cpu.
KIND_PLATFORM: Final = "platform"
#: A domain's kind: one power rail of a board (an INA-type hwmon sensor). What a rail feeds is not known, so it never
#: adds to ``energy.joules``; its ``hw.type`` is ``power_supply``.
KIND_RAIL: Final = "rail"
#: ``energy.attributed.<kind>.joules`` by kind.
ATTRIBUTED_KIND_KEYS: Final = {
    KIND_CPU: ENERGY_ATTRIBUTED_CPU_JOULES,
    KIND_MEMORY: ENERGY_ATTRIBUTED_MEMORY_JOULES,
    KIND_GPU: ENERGY_ATTRIBUTED_GPU_JOULES,
}

# --- Former names ------------------------------------------------------------------------------

#: Names otel-joules wrote before no name was also a namespace (a backend that nests dotted keys, as
#: Elasticsearch and OpenSearch mappings do, can hold only one of ``training.epoch`` and
#: ``training.epoch.interrupted``), by the name that replaces each: ``otel-joules report`` reads archives
#: written with either. docs/migration.md lists them.
FORMER_ATTRIBUTE_NAMES: Final = {
    "training.epoch": TRAINING_EPOCH_NUMBER,
    "training.epochs": TRAINING_EPOCHS_COUNT,
}
#: Metric names renamed for the same reason, by the name that replaces each.
FORMER_METRIC_NAMES: Final = {
    "energy.components.power": METRIC_ENERGY_COMPONENTS_POWER,
    "energy.nested.power": METRIC_ENERGY_NESTED_POWER,
    "energy.estimate.power": METRIC_ENERGY_ESTIMATE_POWER,
}
