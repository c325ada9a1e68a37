"""CO2eq on spans: the span processor's ``on_measurement`` hook that adds carbon attributes.

:func:`span_carbon_from_settings` decides whether an intensity is known (an explicit
value, a configured live provider, or a country: ``country=`` / ``OTEL_JOULES_COUNTRY``)
and resolves it once, when instrumentation is set up; :class:`SpanCarbon` then puts on
every measured span:

=======================================  ==================================================
``energy.co2eq.grams``                   of ``energy.joules`` (the span's interval energy)
``energy.attributed.co2eq.grams``        of ``energy.attributed.joules``, when the span has it
``energy.attributed.self.co2eq.grams``   of ``energy.attributed.self.joules``, when the span
                                         has it: what dashboards and the Collector add up
``carbon.intensity.gco2eq_per_kwh``      the intensity used
``carbon.intensity.source``              ``explicit``, a live provider's name, ``offline``, ...
``carbon.pue``                           the PUE applied
=======================================  ==================================================

A span never waits for the network: the hook only multiplies. With a live provider the
value is refreshed in the background once the provider's cache has expired, and spans
keep the previous value until the new one is there.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from otel_joules._fork import register_fork_hook
from otel_joules.carbon.accounting import CarbonAccounting
from otel_joules.carbon.intensity import CarbonIntensity, resolve_carbon_intensity
from otel_joules.carbon.providers import LiveProvider, providers_from_env
from otel_joules.carbon.units import validate_pue
from otel_joules.config import Settings
from otel_joules.meter.meter import EnergyMeasurement

_log = logging.getLogger("otel_joules")

def carbon_attributes(
    joules: float, intensity: CarbonIntensity, pue: float, span_attributes: Mapping[str, Any] | None = None
) -> dict[str, float | str]:
    """The carbon attributes for a span whose interval energy is ``joules``.

    Shorthand for :meth:`CarbonAccounting.span_attributes
    <otel_joules.carbon.accounting.CarbonAccounting.span_attributes>` (negative joules,
    measurement noise, count as zero there).
    """
    return CarbonAccounting(intensity, pue).span_attributes(joules, span_attributes)


class SpanCarbon:
    """``on_measurement`` hook: sets :func:`carbon_attributes` on each measured span (module docstring).

    Args:
        intensity: The intensity to use now.
        pue: Data-centre PUE (>= 1.0).
        refresh: Resolves the intensity again (live providers); None for values that do
            not change (explicit, offline).
        refresh_after_s: Age after which ``refresh`` is started in the background.
        clock: Monotonic clock in seconds (injectable for tests).
    """

    def __init__(
        self,
        intensity: CarbonIntensity,
        pue: float = 1.0,
        *,
        refresh: Callable[[], CarbonIntensity] | None = None,
        refresh_after_s: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pue = validate_pue(pue)
        # Replaced whole when a refresh brings a new intensity: a span reads one consistent pair.
        self._accounting = CarbonAccounting(intensity, self.pue)
        self._refresh = refresh
        self._refresh_after_s = refresh_after_s
        self._clock = clock
        self._resolved_at = clock()
        self._refreshing = threading.Lock()
        # Held by the refresh thread for the whole request: a child forked meanwhile would
        # never refresh again (that thread does not exist there).
        register_fork_hook(self, "_new_lock")

    def _new_lock(self) -> None:
        self._refreshing = threading.Lock()

    @property
    def intensity(self) -> CarbonIntensity:
        """The intensity spans get now."""
        return self._accounting.intensity

    def __call__(self, span: Any, measurement: EnergyMeasurement) -> None:
        """Set the carbon attributes on ``span`` (live, not yet ended); never blocks on the network."""
        self._maybe_refresh()
        span.set_attributes(self._accounting.span_attributes(measurement.total_joules, span.attributes))

    def _maybe_refresh(self) -> None:
        if self._refresh is None or self._clock() - self._resolved_at < self._refresh_after_s:
            return
        if not self._refreshing.acquire(blocking=False):
            return  # a refresh is already under way
        threading.Thread(target=self._refresh_now, name="otel-joules-carbon-refresh", daemon=True).start()

    def _refresh_now(self) -> None:
        try:
            assert self._refresh is not None
            self._accounting = CarbonAccounting(self._refresh(), self.pue)
        except Exception as exc:  # noqa: BLE001 - keep the previous value; spans must go on
            _log.warning(
                "otel-joules: could not refresh the carbon intensity (%s); keeping %s", exc, self._accounting.intensity
            )
        finally:
            self._resolved_at = self._clock()
            self._refreshing.release()


def span_carbon_from_settings(
    carbon_intensity: float | None = None,
    country: str | None = None,
    pue: float = 1.0,
    *,
    providers: Sequence[LiveProvider] | None = None,
    env: Mapping[str, str] | None = None,
) -> SpanCarbon | None:
    """A :class:`SpanCarbon` when an intensity is known, else None (spans then carry no CO2eq).

    Known means: ``carbon_intensity`` (gCO2eq/kWh) is given, a live provider is
    configured (``providers``, default :func:`~otel_joules.carbon.providers_from_env`),
    or a country is (``country`` or ``OTEL_JOULES_COUNTRY``). The intensity is resolved
    here, once (a live provider's request has a short deadline), by
    :func:`~otel_joules.carbon.resolve_carbon_intensity`.

    Raises:
        ConfigurationError: an intensity that is not a number >= 0, an unknown country,
            a PUE below 1, a misconfigured live provider.
    """
    env = os.environ if env is None else env
    pue = validate_pue(pue)
    live = tuple(providers_from_env(env, country=country) if providers is None else providers)
    has_country = bool((country or Settings.from_env(env).country or "").strip())
    if carbon_intensity is None and not live and not has_country:
        return None

    def resolve() -> CarbonIntensity:
        return resolve_carbon_intensity(carbon_intensity, country, live, env=env)

    intensity = resolve()
    if carbon_intensity is not None or not live:
        return SpanCarbon(intensity, pue)
    return SpanCarbon(intensity, pue, refresh=resolve, refresh_after_s=min(p.cache_ttl_s for p in live))
