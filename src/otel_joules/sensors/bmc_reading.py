"""What one poll of a BMC gives (:class:`BmcReading`) and how it fails (:class:`BmcError`), for every BMC protocol."""

from __future__ import annotations

from typing import NamedTuple

#: No platform a BMC manages draws more than this (a full rack's worth): a reading above it is garbage.
MAX_PLATFORM_WATTS = 100_000.0


class BmcReading(NamedTuple):
    """One poll's values.

    Attributes:
        power_watts: The platform's power now, or None where the BMC gives only energy.
        energy_joules: The BMC's cumulative energy counter, or None where it has none.
    """

    power_watts: float | None
    energy_joules: float | None


class BmcError(Exception):
    """A poll failed: no answer in time, an error code, or a reply that is not a reading.

    The message names what was asked and what came back, never the credentials.
    """
