"""The domain base class: a hashable value naming one energy domain.

A domain's ``repr`` is its name in every output (``package_0``, ``nvidia_gpu_1``) and
equals the id of the core meter's domain it reads (:attr:`otel_joules.sensors.base.Domain.id`).
Two domains are equal when they name the same domain, and equal domains hash alike,
so they work in sets and as dict keys (pyJoules 0.5.1 defined ``__eq__`` without
``__hash__``, which made its domains unhashable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_joules.pyjoules.device.device import Device


class Domain:
    """Base of every domain class; subclasses give :attr:`domain_id` and :meth:`get_device_type`.

    A user-written domain may instead override ``__repr__`` as pyJoules documents it
    (``'my_meter_0'``): its ``repr`` is then its id and its name in every output.
    """

    __slots__ = ()

    @property
    def domain_id(self) -> str:
        """The core meter's id of this domain (``package_0``, ``nvidia_gpu_0``, ``psys``, ...).

        Raises:
            NotImplementedError: the subclass overrides neither this nor ``__repr__``.
        """
        if type(self).__repr__ is not Domain.__repr__:
            return repr(self)
        raise NotImplementedError(f"{type(self).__name__} must define domain_id or __repr__ (the domain's name)")

    def get_device_type(self) -> "type[Device]":
        """The :class:`~otel_joules.pyjoules.device.Device` class that reads this domain."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.domain_id

    def __str__(self) -> str:
        return self.domain_id

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Domain) and other.domain_id == self.domain_id

    def __ne__(self, other: Any) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.domain_id)
