"""Carbon: which gCO2eq/kWh applies, joules -> grams of CO2eq, and readable equivalents.

Typical use::

    from otel_joules.carbon import resolve_carbon_intensity, co2eq_grams, equivalents

    intensity = resolve_carbon_intensity(country="DK")      # offline 2024 average, no network
    grams = co2eq_grams(joules=7.2e6, gco2eq_per_kwh=intensity.gco2eq_per_kwh, pue=1.0)
    print(intensity.source, intensity.detail, grams)

Live values need an explicit provider (``ElectricityMapsProvider``,
``UKCarbonIntensityProvider``, ``EnergiDataServiceProvider``, or
``providers_from_env()``); nothing touches the network by default.
``python -m otel_joules.carbon`` lists the offline table's country codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_joules._lazy import lazy_exports
from otel_joules.carbon.equivalents import FACTORS, Equivalent, EquivalentFactor, equivalents, equivalents_text, km_by_car
from otel_joules.carbon.intensity import (
    SOURCES,
    WORLD_AVERAGE_GCO2EQ_PER_KWH,
    WORLD_AVERAGE_YEAR,
    CarbonIntensity,
    resolve_carbon_intensity,
)
from otel_joules.carbon.offline import OfflineIntensity, lookup_country, offline_table
from otel_joules.carbon.units import JOULES_PER_KWH, co2eq_grams, joules_to_kwh, kwh_to_joules, validate_pue

if TYPE_CHECKING:
    from otel_joules.carbon.providers import (
        ElectricityMapsProvider,
        EnergiDataServiceProvider,
        IpGeolocator,
        LiveProvider,
        ProviderError,
        UKCarbonIntensityProvider,
        providers_from_env,
    )

__all__ = [
    "CarbonIntensity",
    "ElectricityMapsProvider",
    "EnergiDataServiceProvider",
    "Equivalent",
    "EquivalentFactor",
    "FACTORS",
    "IpGeolocator",
    "JOULES_PER_KWH",
    "LiveProvider",
    "OfflineIntensity",
    "ProviderError",
    "SOURCES",
    "UKCarbonIntensityProvider",
    "WORLD_AVERAGE_GCO2EQ_PER_KWH",
    "WORLD_AVERAGE_YEAR",
    "co2eq_grams",
    "equivalents",
    "equivalents_text",
    "joules_to_kwh",
    "km_by_car",
    "kwh_to_joules",
    "lookup_country",
    "offline_table",
    "providers_from_env",
    "resolve_carbon_intensity",
    "validate_pue",
]

# The live providers (HTTP clients: urllib.request and friends) are imported on first use,
# so the offline path (units, the offline table, intensity) stays cheap for importers such
# as the carbontracker log parser.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        name: "otel_joules.carbon.providers"
        for name in (
            "ElectricityMapsProvider",
            "EnergiDataServiceProvider",
            "IpGeolocator",
            "LiveProvider",
            "ProviderError",
            "UKCarbonIntensityProvider",
            "providers_from_env",
        )
    },
)
