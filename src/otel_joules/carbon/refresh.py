"""A carbon intensity that stays current: live providers asked again in a background thread.

:class:`RefreshingIntensity` holds the intensity in use. With live providers (and no
explicit value) it asks them again every ``refresh_s`` seconds in a daemon thread once
:meth:`~RefreshingIntensity.start` is called, so even a provider's timeout never reaches
the caller's loop; :meth:`~RefreshingIntensity.current` only reads. Used by the
carbontracker-compatible tracker and by ``otel-joules run`` (which resolves once and
never starts refreshing).
"""

from __future__ import annotations

import threading
from typing import Mapping, Sequence

from otel_joules._fork import register_fork_hook
from otel_joules.carbon.intensity import CarbonIntensity, resolve_carbon_intensity
from otel_joules.carbon.providers import LiveProvider

#: How often live providers are asked again by default (seconds).
DEFAULT_REFRESH_S = 900.0


class RefreshingIntensity:
    """The carbon intensity in use, refreshed in the background when live providers exist.

    Provider requests are time-bounded and never raise; a failed refresh keeps the last
    value. Fork-safe: the lock is renewed in a forked child.

    Args:
        first: The intensity to use until a refresh replaces it.
        explicit: The user's explicit gCO2eq/kWh, if any: then nothing is ever refreshed.
        country: Passed to :func:`~otel_joules.carbon.resolve_carbon_intensity` on refresh.
        providers: Live providers to ask.
        refresh_s: Seconds between refreshes.
    """

    def __init__(
        self,
        first: CarbonIntensity,
        explicit: float | None = None,
        country: str | None = None,
        providers: Sequence[LiveProvider] = (),
        refresh_s: float = DEFAULT_REFRESH_S,
    ) -> None:
        self._lock = threading.Lock()
        register_fork_hook(self, "_new_lock")  # taken by the refresh thread
        self._current = first
        self._values = [first.gco2eq_per_kwh]
        self._explicit = explicit
        self._country = country
        self._providers = tuple(providers)
        self._refresh_s = refresh_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def resolve(
        cls,
        explicit: float | None,
        country: str | None,
        providers: Sequence[LiveProvider],
        *,
        refresh_s: float = DEFAULT_REFRESH_S,
        env: Mapping[str, str] | None = None,
    ) -> "RefreshingIntensity":
        """Resolve the first intensity now (an invalid explicit value or country raises) and hold it.

        Raises:
            ConfigurationError: see :func:`~otel_joules.carbon.resolve_carbon_intensity`.
        """
        first = resolve_carbon_intensity(explicit, country, providers, env=env)
        return cls(first, explicit, country, providers, refresh_s)

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def current(self) -> CarbonIntensity:
        """The intensity in use now (never blocks on the network)."""
        with self._lock:
            return self._current

    def values(self) -> list[float]:
        """Every gCO2eq/kWh value held so far, the first included, in order."""
        with self._lock:
            return list(self._values)

    def set_providers(self, providers: Sequence[LiveProvider]) -> None:
        """Ask these providers from now on: once now (in the background) and every refresh period."""
        with self._lock:
            self._providers = tuple(providers)
            started = self._thread is not None
        if self._explicit is not None or not providers or self._stop.is_set():
            return
        if started:
            threading.Thread(target=self._refresh_once, name="otel-joules-intensity-now", daemon=True).start()
        else:
            self.start(now=True)

    def _refresh_once(self) -> None:
        try:
            value = resolve_carbon_intensity(None, self._country, self._providers)
        except Exception:  # noqa: BLE001 - keep the last value
            return
        with self._lock:
            self._current = value
            self._values.append(value.gco2eq_per_kwh)

    def start(self, *, now: bool = False) -> None:
        """Start refreshing in the background (once; nothing to do without live providers)."""
        if self._explicit is not None or not self._providers or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(now,), name="otel-joules-intensity", daemon=True)
        self._thread.start()

    def _run(self, now: bool = False) -> None:
        if now:
            self._refresh_once()
        while not self._stop.wait(self._refresh_s):
            self._refresh_once()

    def stop(self) -> None:
        """Stop refreshing; :meth:`current` keeps the last value."""
        self._stop.set()
