"""Settings shared by every layer, read from keywords first, then ``OTEL_JOULES_*`` variables.

=================================  ==========================================  =========
Environment variable               Meaning                                     Default
=================================  ==========================================  =========
``OTEL_JOULES_SYSFS_ROOT``         Where sysfs is mounted (containers often    ``/sys``
                                   mount the host's elsewhere)
``OTEL_JOULES_PROCFS_ROOT``        Where procfs is mounted (host busy time,    ``/proc``
                                   process and thread CPU times for attribution)
``OTEL_JOULES_CPU_TDP_WATTS``      CPU thermal design power for the estimator  ``85``
``OTEL_JOULES_MEMORY_WATTS_PER_GB`` Memory power per GB for the estimator      ``0.375``
``OTEL_JOULES_MAX_POWER_WATTS``    Power bound for RAPL zones without a        ``1000``
                                   ``constraint_*_max_power_uw`` file
``OTEL_JOULES_MAX_SNAPSHOT_AGE_S`` Reuse a counter snapshot younger than this  ``0``
                                   (seconds; 0 reads the counters every time)
=================================  ==========================================  =========

The estimator's defaults are CodeCarbon's published fallbacks: 85 W TDP when the
CPU model is unknown, and 3 W per 8 GB of memory (0.375 W/GB).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from otel_joules.errors import ConfigurationError

DEFAULT_SYSFS_ROOT = "/sys"
DEFAULT_PROCFS_ROOT = "/proc"
DEFAULT_CPU_TDP_WATTS = 85.0
DEFAULT_MEMORY_WATTS_PER_GB = 0.375
DEFAULT_MAX_POWER_WATTS = 1000.0
DEFAULT_MAX_SNAPSHOT_AGE_S = 0.0


def _env_float(env: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name}={raw!r} is not a number; set it to a positive number or unset it") from None
    if not (value > 0 or (allow_zero and value == 0)):
        raise ConfigurationError(f"{name}={raw!r} must be a {'non-negative' if allow_zero else 'positive'} number")
    return value


@dataclass(frozen=True)
class Settings:
    """Resolved configuration of sensors and meter."""

    sysfs_root: str = DEFAULT_SYSFS_ROOT
    procfs_root: str = DEFAULT_PROCFS_ROOT
    cpu_tdp_watts: float = DEFAULT_CPU_TDP_WATTS
    memory_watts_per_gb: float = DEFAULT_MEMORY_WATTS_PER_GB
    max_power_watts: float = DEFAULT_MAX_POWER_WATTS
    max_snapshot_age_s: float = DEFAULT_MAX_SNAPSHOT_AGE_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> "Settings":
        """Build settings from ``env`` (default ``os.environ``); keywords that are not None win."""
        env = os.environ if env is None else env
        values: dict[str, object] = {
            "sysfs_root": env.get("OTEL_JOULES_SYSFS_ROOT") or DEFAULT_SYSFS_ROOT,
            "procfs_root": env.get("OTEL_JOULES_PROCFS_ROOT") or DEFAULT_PROCFS_ROOT,
            "cpu_tdp_watts": _env_float(env, "OTEL_JOULES_CPU_TDP_WATTS", DEFAULT_CPU_TDP_WATTS),
            "memory_watts_per_gb": _env_float(env, "OTEL_JOULES_MEMORY_WATTS_PER_GB", DEFAULT_MEMORY_WATTS_PER_GB),
            "max_power_watts": _env_float(env, "OTEL_JOULES_MAX_POWER_WATTS", DEFAULT_MAX_POWER_WATTS),
            "max_snapshot_age_s": _env_float(
                env, "OTEL_JOULES_MAX_SNAPSHOT_AGE_S", DEFAULT_MAX_SNAPSHOT_AGE_S, allow_zero=True
            ),
        }
        for key, value in overrides.items():
            if value is None:
                continue
            if key not in values:
                raise ConfigurationError(f"unknown setting {key!r}; known: {', '.join(sorted(values))}")
            if key == "max_snapshot_age_s":
                if not (isinstance(value, (int, float)) and value >= 0):
                    raise ConfigurationError(f"{key}={value!r} must be a non-negative number of seconds")
            elif key not in ("sysfs_root", "procfs_root") and not (isinstance(value, (int, float)) and value > 0):
                raise ConfigurationError(f"{key}={value!r} must be a positive number")
            values[key] = value
        return cls(**values)  # type: ignore[arg-type]
