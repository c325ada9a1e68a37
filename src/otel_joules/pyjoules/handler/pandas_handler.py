"""``PandasHandler`` and ``trace_to_dataframe``: samples as a pandas DataFrame, as in pyJoules.

Columns: ``timestamp``, ``tag``, ``duration``, then one column per domain (microjoules,
the GPU included) in the order of the samples' ``energy``, then ``energy.below_resolution``
(True where the sample was shorter than a counter's update period, so its values are quantised,
often 0.0: the spans' attribute); one row per sample. A domain
missing from a sample (its counter failed during the run) is NaN there, where pyJoules
raised ``UnconsistantSamplesError`` and lost every sample.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, List

from otel_joules.errors import import_extra
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace  # noqa: F401 - pyJoules' names
from otel_joules.pyjoules.exception import PyJoulesException
from otel_joules.pyjoules.handler.csv_handler import BASE_COLUMNS, BELOW_RESOLUTION_COLUMN, domain_columns
from otel_joules.pyjoules.handler.handler import EnergyHandler, UnconsistantSamplesError  # noqa: F401 - pyJoules' names


if TYPE_CHECKING:
    import pandas

def _pandas() -> Any:
    # Imported when first needed: the base install has no pandas.
    return import_extra("pandas", "PandasHandler", "pandas")


class NoSampleProcessedError(PyJoulesException):
    """:meth:`PandasHandler.get_dataframe` was called before any measurement reached the handler."""


def trace_to_dataframe(trace: Iterable[EnergySample]) -> "pandas.DataFrame":
    """One row per sample: ``timestamp, tag, duration, <domains>, energy.below_resolution`` (an empty DataFrame for
    no sample)."""
    pandas = _pandas()
    samples: List[EnergySample] = list(trace)
    if not samples:
        return pandas.DataFrame()
    domains = domain_columns(samples)
    rows = [
        [
            sample.timestamp,
            sample.tag,
            sample.duration,
            *(sample.energy.get(d, math.nan) for d in domains),
            bool(getattr(sample, "below_resolution", False)),  # samples built by pyJoules-era code lack it
        ]
        for sample in samples
    ]
    return pandas.DataFrame(columns=[*BASE_COLUMNS, *domains, BELOW_RESOLUTION_COLUMN], data=rows)


class PandasHandler(EnergyHandler):
    """Collects traces in memory; :meth:`get_dataframe` returns them as one DataFrame.

    Raises :class:`~otel_joules.errors.MissingExtraError` at construction when
    pandas is not installed (``pip install 'otel-joules[pandas]'``), before anything is measured.
    """

    def __init__(self) -> None:
        _pandas()
        super().__init__()

    def get_dataframe(self) -> "pandas.DataFrame":
        """Every sample received so far (columns: module docstring).

        Raises:
            NoSampleProcessedError: nothing was measured yet.
        """
        samples = self._take_samples()
        if not self.traces:
            raise NoSampleProcessedError("no measurement has reached this PandasHandler yet; call the measured code first")
        return trace_to_dataframe(samples)
