"""``EnergySample`` and ``EnergyTrace``, as in pyJoules 0.5.1's ``pyJoules.energy_trace``.

Units, as pyJoules documents them: ``timestamp`` is ``time.time()`` when the sample
began (seconds since the Unix epoch), ``duration`` is in seconds, and ``energy`` maps
each domain name (``package_0``, ``dram_0``, ``nvidia_gpu_0``, ...) to the
**microjoules** spent during the sample -- the GPU included, which pyJoules reported in
NVML's millijoules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Sequence, Union


@dataclass
class EnergySample:
    """The energy spent by every measured domain between two points of a trace.

    Attributes:
        timestamp: ``time.time()`` at the beginning of the sample (seconds).
        tag: The sample's name (the function name, ``start_tag``, or ``record(tag)``).
        duration: Length of the sample in seconds (from the monotonic clock).
        energy: Microjoules per domain name, in the order the domains were selected. A
            domain whose counter failed during the run is absent rather than wrong.
        below_resolution: The sample is shorter than a counter's update period, so its values are
            quantised (often 0.0 for a short call), not exact (spans' ``energy.below_resolution``).
    """

    timestamp: float
    tag: str
    duration: float
    energy: Dict[str, float]
    below_resolution: bool = False


class EnergyTrace:
    """An ordered collection of :class:`EnergySample`, indexable by position or by tag.

    Args:
        samples: The samples, in order.
    """

    def __init__(self, samples: Iterable[EnergySample]) -> None:
        self._samples: List[EnergySample] = list(samples)

    def _get_sample_from_tag(self, tag: str) -> EnergySample | None:
        for sample in self._samples:
            if sample.tag == tag:
                return sample
        return None

    def __getitem__(self, key: Union[int, str]) -> EnergySample:
        """The n-th sample (``trace[0]``) or the first sample with that tag (``trace['foo']``).

        Raises:
            IndexError: no sample at that position.
            KeyError: no sample has that tag.
        """
        if isinstance(key, int):
            try:
                return self._samples[key]
            except IndexError:
                raise IndexError(f"trace index out of range: {key} (the trace holds {len(self._samples)} samples)") from None
        sample = self._get_sample_from_tag(key)
        if sample is None:
            raise KeyError(f"this tag doesn't match any sample: {key}")
        return sample

    def __iter__(self) -> Iterator[EnergySample]:
        """The samples, in order."""
        return iter(self._samples)

    def __len__(self) -> int:
        """Number of samples."""
        return len(self._samples)

    def __contains__(self, key: object) -> bool:
        """Whether a sample has the tag ``key``."""
        return any(sample.tag == key for sample in self._samples)

    def __add__(self, trace: "EnergyTrace") -> "EnergyTrace":
        """A new trace with this trace's samples, then ``trace``'s."""
        return EnergyTrace(self._samples + trace._samples)

    def __iadd__(self, trace: "EnergyTrace") -> "EnergyTrace":
        """Append ``trace``'s samples to this trace."""
        self._samples += trace._samples
        return self

    def __repr__(self) -> str:
        return f"EnergyTrace({self._samples!r})"

    def append(self, sample: EnergySample) -> None:
        """Append one sample."""
        self._samples.append(sample)

    def remove_idle(self, idle: Sequence[Dict[str, float]]) -> None:
        """Subtract idle energy (one dict per sample, by domain) from every sample, in place.

        Raises:
            ValueError: ``idle`` does not hold one entry per sample, or lacks a domain of a sample.
        """
        if len(idle) != len(self._samples):
            raise ValueError(f"idle holds {len(idle)} entries but the trace has {len(self._samples)} samples")
        for idle_energy, sample in zip(idle, self._samples):
            for domain in sample.energy:
                if domain not in idle_energy:
                    raise ValueError(f"domain not present in idle values: {domain}")
        # Checked first, subtracted after: a bad entry must not leave the trace half-changed.
        for idle_energy, sample in zip(idle, self._samples):
            for domain in sample.energy:
                sample.energy[domain] -= idle_energy[domain]

    def clean_data(self, guards: Sequence[Callable[[EnergySample], bool]] = ()) -> None:
        """Drop samples with a negative energy value, and samples any guard returns False for.

        Args:
            guards: Functions of a sample returning True to keep it.
        """
        self._samples = [
            sample
            for sample in self._samples
            if all(value >= 0 for value in sample.energy.values()) and all(guard(sample) for guard in guards)
        ]
