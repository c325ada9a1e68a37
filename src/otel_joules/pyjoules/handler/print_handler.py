"""``PrintHandler``: one line per sample on standard output, in pyJoules' format.

Format (pyJoules 0.5.1, byte for byte)::

    begin timestamp : 1700000000.5; tag : foo; duration : 0.25; package_0 : 1500000.0; dram_0 : 250000.0

``timestamp`` is ``time.time()`` at the start, ``duration`` in seconds, then
``; <domain> : <microjoules>`` for every domain, each number as Python's ``str``.
"""

from __future__ import annotations

import sys

from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.handler.handler import EnergyHandler


def format_sample(sample: EnergySample) -> str:
    """The line :class:`PrintHandler` prints for ``sample`` (without the newline)."""
    head = f"begin timestamp : {sample.timestamp}; tag : {sample.tag}; duration : {sample.duration}"
    return head + "".join(f"; {domain} : {value}" for domain, value in sample.energy.items())


class PrintHandler(EnergyHandler):
    """Prints every sample when it arrives; holds nothing."""

    def process(self, trace: EnergyTrace) -> None:
        """Print one line per sample of ``trace`` to ``sys.stdout`` (looked up at each call)."""
        # One write per trace: lines of threads measuring at once do not interleave.
        text = "".join(format_sample(sample) + "\n" for sample in trace)
        if text:
            sys.stdout.write(text)
