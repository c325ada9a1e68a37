"""One aggregate over everything exported: carbontracker logs, CSV, JSON lines and OTLP JSON files.

Used by ``otel-joules report PATH...``; as a library::

    from otel_joules.report import build_report, format_report
    report = build_report(["logs/", "spans.csv", "otlp.jsonl"], country="DK")
    print(format_report(report))
    print(report.total_joules, report.total_co2eq_grams)   # None when traces and carbontracker logs mix
    for kind in report.totals:                              # one KindTotals per kind of run, never added
        print(kind.kind, kind.joules, kind.co2eq_grams)

**Engine.** Span files are aggregated on DuckDB (embedded, out of core; the ``[report]``
extra): :mod:`otel_joules.report.sql` holds all of its SQL, :envvar:`OTEL_JOULES_REPORT_MEMORY_LIMIT`
its memory limit (it spills to a private temporary folder beyond it). Damaged files are read
line by line in Python, so each bad record is skipped with its own reason.

**Listing.** ``build_report(..., max_runs=N)`` (``otel-joules report --runs N``, default 1000 there) keeps
the first N runs (carbontracker runs, then traces by start) in :attr:`Report.runs`, made in Python with every
label; the others are added up in SQL with the same sums in the same order and counted in
:attr:`Report.runs_not_listed` and :attr:`Report.tally`, so memory stays flat however many runs there are. The
totals are exact either way (correctly rounded sums of every run's figures).

**Runs.** A run is a trace (all spans with one trace id, from any number of files; a span
exported twice, e.g. to CSV and to OTLP, counts once) or a carbontracker log pair (standard
and output log with the same name stem). Formats are recognised by content; see
:mod:`otel_joules.report.readers`. Corrupt or unknown inputs are skipped, each with a
:class:`Skipped` entry saying which and why.

A log pair written by the carbontracker-compatible tracker names its trace (an
``OpenTelemetry trace_id ...`` line in the standard log); when that trace's spans are among
the inputs too, the run is counted once, from the spans, and the log pair is listed as
skipped with that reason. The log format, that line included, is
:mod:`otel_joules.training.logformat`; logs are parsed by :mod:`otel_joules.training.logread`
and paired by :mod:`otel_joules.training.logfiles`.

**Energy of a trace: the attributed share (no double counting).** Anything that sums
adds up the spans' *attributed share* of host energy, never interval energy: per trace,
``energy.attributed.joules`` (inclusive of children) of the topmost spans carrying it, or,
when an export kept only ``energy.attributed.self.joules``, that over every span. The host's
interval energy over the same spans (``energy.joules`` of the topmost spans carrying it) is
kept beside it (:attr:`RunSummary.host_interval_joules`). Exports without attribution (older
versions) fall back to the topmost spans' ``energy.joules``: machine-level energy over each
span's interval, so a nested span's energy is inside its parent's and only a span without
an ancestor carrying it counts; several such spans of one trace are added, which overcounts
when they ran at the same time (the run's notes say so). :attr:`RunSummary.energy_basis`
says which was summed; grams are always of that basis (``energy.attributed.co2eq.grams``
for shares, never the interval's ``energy.co2eq.grams``).

**A multi-rank job is one run.** The trainer callbacks put ranks above 0's ``epoch`` spans
under rank 0's ``training`` span, each span naming its ``training.rank``: a share is its own
process's, so a span nested under another rank's counts beside it (the ranks' shares add),
while the host's interval energy, the same for every rank on the host, is counted once
(rank 0's topmost spans). Epochs with one number are one epoch of the run, their shares added.

**Energy of a carbontracker run: one total.** The output log's actual consumption, the
figure the tracker printed and ``parser.aggregate_consumption`` returns (kWh with PUE, back to
IT joules with the log's PUE; its grams as logged). Per-epoch figures are the standard log's
average power of each component x epoch duration (rounded to 0.01 s in the log, so they may
add up to slightly more or less; the run's notes say so). Where the log has no matching
actual consumption (or carbontracker 2.x's per-device averaging had to be corrected), the
total is recomputed from the epochs: logs written by carbontracker 2.x state a component's
power as the mean over its devices, and the report multiplies it by the number of devices
(the sum is what the machine drew). A power of ``None`` counts as 0 W and the run's notes
say how often.

**Labels.** Every run says whether its energy was measured or estimated
(:attr:`RunSummary.energy_source`: the spans' ``energy.source``, or the log's ``ESTIMATE``
line and device names), per kind too (:attr:`RunSummary.parts`: CPU, memory, GPU), and
whether a span or epoch was below a counter's resolution. A run with a ``partial`` counted
span (a domain that could not be read at its start or end) is labelled ``partial``, whatever
its other spans say, and its notes name the domains left out: its joules are low.

**kWh and CO2eq.** Per run, ``kWh = joules x PUE / 3.6e6`` and ``grams = kWh x intensity``:

- PUE: ``--pue`` if given; else the run's own (carbontracker's PUE line, the spans'
  ``carbon.pue``); else 1.0 (marked ``default``).
- Intensity: ``--intensity`` or ``--country`` (offline yearly average) if given, for every
  run; else a carbontracker log's own logged grams; else the run's own intensity
  (carbontracker's "Average carbon intensity", the spans'
  ``carbon.intensity.gco2eq_per_kwh``, energy-weighted); else the spans' own grams of the
  summed basis as they are (spans with grams but no intensity, or
  CSV and JSON-lines files exported before those formats kept ``carbon.*`` attributes);
  else :func:`otel_joules.carbon.resolve_carbon_intensity` (``OTEL_JOULES_COUNTRY``, or
  the world average). ``intensity_source`` says which.

The spans' ``carbon.*`` attributes are read the same way from every span format: OTLP
JSON files hold all attributes, and CSV (its ``attributes`` column) and JSON-lines
exports hold every ``energy.*``, ``carbon.*`` and ``training.*`` one, which is all the
report uses. An epoch span is numbered by its ``training.epoch.number`` (by its position among
the trace's epoch spans only in exports written before the formats kept ``training.*``).

**Totals: one per kind of run.** Traces (their attributed shares; interval energy for exports without
attribution) and carbontracker logs (the host's energy each tracker logged) are totalled apart, each in a
:class:`KindTotals` of :attr:`Report.totals`; a report of one kind has its one total in
:attr:`Report.total_joules` and friends, a report of both has None there: a share and a host's energy are
never added into one figure. Equivalents (km by car and more) are of each total, with their source figures.
"""

from otel_joules.report.aggregate import build_report
from otel_joules.report.model import (
    CarbonTrackerRun,
    EnergyPart,
    EpochSummary,
    KindTotals,
    Report,
    ReportError,
    RunSummary,
    RunTally,
    Skipped,
    SpanRow,
)
from otel_joules.report.plot import plot_report, report_figure
from otel_joules.report.readers import read_inputs
from otel_joules.report.render import format_report, format_skipped, report_dict
from otel_joules.report.run_carbon import CarbonOptions

__all__ = [
    "CarbonOptions",
    "CarbonTrackerRun",
    "EnergyPart",
    "EpochSummary",
    "KindTotals",
    "Report",
    "ReportError",
    "RunSummary",
    "RunTally",
    "Skipped",
    "SpanRow",
    "build_report",
    "format_report",
    "format_skipped",
    "plot_report",
    "read_inputs",
    "report_figure",
    "report_dict",
]
