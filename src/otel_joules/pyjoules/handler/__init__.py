"""Handlers (``pyJoules.handler``): what happens to each measurement.

:class:`PrintHandler` (the default) prints; :mod:`.csv_handler`, :mod:`.pandas_handler`
and :mod:`.mongo_handler` collect and save. All outputs use microjoules for every domain.
"""

from otel_joules.pyjoules.handler.handler import EnergyHandler, UnconsistantSamplesError
from otel_joules.pyjoules.handler.print_handler import PrintHandler

__all__ = ["EnergyHandler", "PrintHandler", "UnconsistantSamplesError"]
