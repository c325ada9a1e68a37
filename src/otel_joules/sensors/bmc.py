"""The platform's power from its BMC (Redfish or IPMI DCMI), read by ``otel-joules agent`` only.

The BMC measures the whole box, usually at the power supplies' input: what RAPL and the GPUs' counters do not
see (fans, disks, NICs, the board, the supplies' losses) is in it. Its reading is the host's energy
(``hw.host.*``), and the part the components do not cover is published beside it
(:mod:`otel_joules.metrics.instruments`). The agent also serves its joules (only its joules) to the clients that
ask (:mod:`otel_joules.agent.server`), whose meters then share that uncovered part (:mod:`otel_joules.attribution.uncovered`).

**Configuration** (the file named by ``--bmc-config`` or ``OTEL_JOULES_BMC_CONFIG``, TOML; docs/bmc.md)::

    poll_interval_s = 1.0        # optional, DEFAULT_POLL_INTERVAL_S
    timeout_s = 2.0              # optional, DEFAULT_TIMEOUT_S
    [redfish]                    # and/or [ipmi]
    url = "https://bmc.example"
    username = "monitor"
    password = "..."
    chassis = "1U"               # optional: the first chassis with a reading
    verify_tls = true            # optional
    ca_file = "/etc/otel-joules/bmc-ca.pem"  # optional
    [ipmi]
    host = "10.0.0.5"
    port = 623                   # optional
    username = "monitor"
    password = "..."

The credentials stay in this file and in the agent: the file must be a regular file that neither group nor others
may read or write (it is refused otherwise, before anything in it is used); they are never in a command line, a
log line, a domain's attributes (``hw.id`` is the BMC's address) or anything the agent serves to its clients.

**Polling.** Each BMC is polled in threads of its own every ``poll_interval_s``; a poll waits at most
``timeout_s`` for its answer (a request still in flight is not sent again). The meter's reads take the poller's latest reading and never wait for the BMC: a slow or dead BMC
delays no span and no other source. Its first failure is said once (with the reason); while it has no reading
younger than :func:`max_age_s` its domain is away (left out, not zero) and comes back with the next reading.

**Energy.** Where the BMC counts energy (Redfish ``EnergyJoules``/``EnergykWh``), that counter is the domain
(``energy.method = counter``), carried forward from the latest poll at the latest power (never backwards), so its
value is not up to a poll old. Elsewhere (IPMI DCMI, Redfish ``PowerWatts``/``PowerConsumedWatts``) the power is
integrated by the meter's sampler (``energy.method = power_integration``), holding each poll's reading until the
next; a time with no reading is not integrated (it is not guessed).
"""

from __future__ import annotations

import logging
import math
import os
import queue
import stat
import threading
import time
import tomllib
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol
from urllib.parse import urlsplit

from otel_joules.errors import ConfigurationError
from otel_joules.sensors.base import Breadth, Channel, Discovery, Domain, Method
from otel_joules.sensors.bmc_reading import BmcError, BmcReading
from otel_joules.sensors.integration import POWER_SAMPLE_PERIOD_S, PowerIntegral
from otel_joules.semconv import KIND_PLATFORM

_log = logging.getLogger("otel_joules")

#: How often a BMC is polled by default: BMCs refresh their power readings about once a second.
DEFAULT_POLL_INTERVAL_S = 1.0
#: The poll interval's bounds: faster loads the BMC for no new value; slower is no longer a power reading.
POLL_INTERVAL_BOUNDS_S = (0.05, 60.0)
#: How long one request may take by default.
DEFAULT_TIMEOUT_S = 2.0
TIMEOUT_BOUNDS_S = (0.05, 30.0)
#: Domain ids of the BMC readings (kind platform, the broadest: :attr:`~otel_joules.sensors.base.Breadth.BMC`).
REDFISH_DOMAIN = "bmc_redfish"
IPMI_DOMAIN = "bmc_ipmi"
#: What a BMC reading covers, for ``otel-joules devices``.
BMC_COVERS = (
    "the whole platform as its BMC measures it (usually the power supplies' input: CPUs, memory, GPUs, fans, disks, "
    "NICs, the board and the supplies' losses)"
)
#: File modes that let someone other than the agent's user read or change the credentials.
_NOT_PRIVATE = 0o077


class BmcReader(Protocol):
    """One BMC protocol's client: :class:`~otel_joules.sensors.redfish.RedfishReader`, :class:`~otel_joules.sensors.ipmi.IpmiReader`."""

    def read(self) -> BmcReading:
        """One reading; BmcError when there is none."""

    def close(self) -> None:
        """Release the session."""


@dataclass(frozen=True)
class BmcTarget:
    """One configured BMC: how to read it, and the domain it becomes.

    Attributes:
        domain_id: :data:`REDFISH_DOMAIN` or :data:`IPMI_DOMAIN`.
        label: The BMC in words, for messages (protocol and address; never a credential).
        hw_id: ``hw.id`` of its reading (the address).
        make_reader: Builds the client (called once, in :func:`discover`).
    """

    domain_id: str
    label: str
    hw_id: str
    make_reader: Callable[[], BmcReader]


@dataclass(frozen=True)
class BmcConfig:
    """The agent's BMC file, checked: what to poll, how often and how patiently."""

    targets: tuple[BmcTarget, ...]
    poll_interval_s: float
    timeout_s: float


def max_age_s(poll_interval_s: float, timeout_s: float) -> float:
    """How old the latest reading may be and still stand for now: two polls and one request's timeout."""
    return 2 * poll_interval_s + timeout_s


def read_private_file(path: str) -> bytes:
    """The bytes of ``path``, a regular file that neither group nor others may read or write.

    Raises:
        ConfigurationError: it cannot be read, is not a regular file (a symlink is not followed), or is not private.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigurationError(f"the BMC file {path} cannot be opened: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigurationError(f"the BMC file {path} is not a regular file: give the file itself")
        if info.st_mode & _NOT_PRIVATE:
            raise ConfigurationError(
                f"the BMC file {path} holds credentials but group or others may read or change it "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): `chmod 600 {path}` (owned by the agent's user), then start again"
            )
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _bounded(table: dict[str, Any], key: str, default: float, bounds: tuple[float, float], path: str) -> float:
    value = table.get(key, default)
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
        raise ConfigurationError(f"{path}: {key} = {value!r} is not a number of seconds from {low:g} to {high:g}")
    return float(value)


def _text(table: dict[str, Any], key: str, section: str, path: str, required: bool = True) -> str | None:
    value = table.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        # Never the value itself: it may be a password.
        raise ConfigurationError(f"{path}: [{section}] {key} must be a non-empty string")
    return value


def _unknown_keys(table: dict[str, Any], known: set[str], where: str, path: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigurationError(f"{path}: {where} has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


def _redfish_target(table: dict[str, Any], timeout_s: float, path: str) -> BmcTarget:
    from otel_joules.sensors.redfish import RedfishReader

    _unknown_keys(table, {"url", "username", "password", "chassis", "verify_tls", "ca_file"}, "[redfish]", path)
    url = _text(table, "url", "redfish", path)
    assert url is not None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{path}: [redfish] url must be http(s)://HOST[:PORT], the BMC's address")
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(f"{path}: [redfish] url holds a user or password: give them as username and password instead")
    username = _text(table, "username", "redfish", path, required=False)
    password = _text(table, "password", "redfish", path, required=username is not None)
    chassis = _text(table, "chassis", "redfish", path, required=False)
    ca_file = _text(table, "ca_file", "redfish", path, required=False)
    verify_tls = table.get("verify_tls", True)
    if not isinstance(verify_tls, bool):
        raise ConfigurationError(f"{path}: [redfish] verify_tls must be true or false")
    address = f"{parts.scheme}://{parts.netloc}"
    if parts.scheme == "http" and username is not None:
        _log.warning("otel-joules agent: the Redfish BMC %s is reached over plain HTTP: its credentials cross the network unencrypted", address)
    if parts.scheme == "https" and not verify_tls:
        _log.warning("otel-joules agent: the Redfish BMC %s's certificate is not checked (verify_tls = false)", address)
    label = f"Redfish BMC {address}" + (f" chassis {chassis}" if chassis else "")
    return BmcTarget(
        REDFISH_DOMAIN,
        label,
        f"redfish:{parts.netloc}" + (f"/{chassis}" if chassis else ""),
        lambda: RedfishReader(url, username, password, chassis, timeout_s, verify_tls, ca_file),
    )


def _ipmi_target(table: dict[str, Any], timeout_s: float, path: str) -> BmcTarget:
    from otel_joules.sensors.ipmi import IPMI_PORT, IpmiReader

    _unknown_keys(table, {"host", "port", "username", "password"}, "[ipmi]", path)
    host = _text(table, "host", "ipmi", path)
    username = _text(table, "username", "ipmi", path)
    password = _text(table, "password", "ipmi", path)
    assert host is not None and username is not None and password is not None
    port = table.get("port", IPMI_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigurationError(f"{path}: [ipmi] port must be a port number (default {IPMI_PORT})")
    reader = IpmiReader(host, port, username, password, timeout_s)  # a missing extra is said now
    return BmcTarget(IPMI_DOMAIN, f"IPMI BMC {host}:{port}", f"ipmi:{host}:{port}", lambda: reader)


def load_config(path: str) -> BmcConfig:
    """The BMC file at ``path``, checked (private, well-formed, known keys).

    Raises:
        ConfigurationError: what is wrong and what to do, never a credential's value.
    """
    raw = read_private_file(path)
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"the BMC file {path} is not TOML: {exc}") from None
    _unknown_keys(document, {"poll_interval_s", "timeout_s", "redfish", "ipmi"}, "the file", path)
    poll_interval_s = _bounded(document, "poll_interval_s", DEFAULT_POLL_INTERVAL_S, POLL_INTERVAL_BOUNDS_S, path)
    timeout_s = _bounded(document, "timeout_s", DEFAULT_TIMEOUT_S, TIMEOUT_BOUNDS_S, path)
    targets: list[BmcTarget] = []
    for section, build in (("redfish", _redfish_target), ("ipmi", _ipmi_target)):
        table = document.get(section)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise ConfigurationError(f"{path}: {section} must be a table ([{section}])")
        targets.append(build(table, timeout_s, path))
    if not targets:
        raise ConfigurationError(f"{path}: no [redfish] or [ipmi] table: say which BMC to read")
    return BmcConfig(tuple(targets), poll_interval_s, timeout_s)


class BmcSample(NamedTuple):
    """One good poll: when it answered (monotonic seconds), what it said, and the power it implies."""

    time_s: float
    reading: BmcReading
    power_watts: float | None


class RequestThread:
    """Runs one BMC request at a time in a daemon thread of its own, so the poller can stop waiting for it.

    A client library's own timeouts are per socket operation (urllib) or grow over retries (pyghmi's, up to a
    minute): this thread may stay in a request that long, but no one waits for it beyond the poll's timeout, and
    a hung request never holds up the agent's exit (daemon).
    """

    def __init__(self, reader: BmcReader, name: str, clock: Callable[[], float]) -> None:
        self._reader = reader
        self._clock = clock
        self._asks: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self.answers: queue.SimpleQueue[tuple[float, BmcReading | BaseException]] = queue.SimpleQueue()
        self.busy = False
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def ask(self) -> None:
        """Start one request (the caller checks :attr:`busy` first)."""
        self.busy = True
        self._asks.put(True)

    def stop(self) -> None:
        """End the thread (closing the reader) after its request in flight, if any."""
        self._asks.put(False)

    def _run(self) -> None:
        while self._asks.get():
            started_s = self._clock()
            try:
                answer: BmcReading | BaseException = self._reader.read()
            except BaseException as exc:  # noqa: BLE001 - handed to the poller, which says it
                answer = exc
            self.answers.put((started_s, answer))
        try:
            self._reader.close()
        except Exception:  # noqa: BLE001 - closing a dead BMC's session must not fail the agent's exit
            pass


class BmcPoller:
    """Polls one BMC in threads of its own; :meth:`latest` never waits for it.

    Each poll waits at most ``timeout_s`` for its answer; a request still in flight at the next poll is waited
    for again (no second request is sent meanwhile), and an answer that comes later than ``timeout_s`` after its
    request started is dropped (its reading is not of now).

    Args:
        label: The BMC in words, for messages.
        domain_id: Its domain, for messages.
        reader: The protocol client (used, and closed, by one request thread only).
        poll_interval_s: Time between the starts of two polls.
        timeout_s: How long a poll waits for its answer.
        clock: Monotonic seconds.
    """

    def __init__(
        self,
        label: str,
        domain_id: str,
        reader: BmcReader,
        poll_interval_s: float,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.domain_id = domain_id
        self.poll_interval_s = poll_interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: deque[BmcSample] = deque(maxlen=2)
        self._failing = False
        self._said_failure = False
        #: The latest poll's failure, in words (None after a good poll).
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._first = threading.Event()
        self._requests = RequestThread(reader, f"otel-joules-{domain_id}-request", clock)
        self._thread = threading.Thread(target=self._run, name=f"otel-joules-{domain_id}", daemon=True)
        self._thread.start()

    def wait_first(self, timeout_s: float) -> BmcSample | None:
        """Wait up to ``timeout_s`` for the first poll to end; its sample, or None if it failed or has not ended."""
        self._first.wait(timeout_s)
        return self.latest()

    def latest(self) -> BmcSample | None:
        """The latest good poll, or None before the first."""
        with self._lock:
            return self._samples[-1] if self._samples else None

    def _run(self) -> None:
        next_s = self._clock()
        while not self._stop.is_set():
            self._poll()
            self._first.set()
            next_s += self.poll_interval_s
            now_s = self._clock()
            if next_s < now_s:  # a poll that ran long: start again now, no burst of catch-up polls
                next_s = now_s
            self._stop.wait(next_s - now_s)
        self._requests.stop()

    def _poll(self) -> None:
        if not self._requests.busy:
            self._requests.ask()
        try:
            started_s, answer = self._requests.answers.get(timeout=self.timeout_s)
        except queue.Empty:
            self._failed(f"no answer within {self.timeout_s:g} s")
            return
        self._requests.busy = False
        now_s = self._clock()
        if isinstance(answer, BmcError):
            self._failed(str(answer))
        elif isinstance(answer, BaseException):
            # A client library's surprise is one more failed poll, never the poller's end.
            self._failed(f"{type(answer).__name__}: {answer}")
        elif now_s - started_s > self.timeout_s + self.poll_interval_s:
            self._failed(f"an answer {now_s - started_s:.1f} s after its request, later than {self.timeout_s:g} s")
        else:
            self._answered(answer, now_s)

    def _answered(self, reading: BmcReading, now_s: float) -> None:
        with self._lock:
            previous = self._samples[-1] if self._samples else None
            power = reading.power_watts
            if power is None and reading.energy_joules is not None and previous is not None and previous.reading.energy_joules is not None:
                elapsed_s = now_s - previous.time_s
                delta_j = reading.energy_joules - previous.reading.energy_joules
                power = delta_j / elapsed_s if elapsed_s > 0 and delta_j >= 0 else None
            self._samples.append(BmcSample(now_s, reading, power))
            was_failing, self._failing, self.last_error = self._failing, False, None
        if was_failing:
            _log.info("otel-joules agent: the %s answers again: %s is measured again", self.label, self.domain_id)

    def _failed(self, why: str) -> None:
        with self._lock:
            self._failing, self.last_error = True, why
            say = not self._said_failure
            self._said_failure = True
        if say:
            _log.warning(
                "otel-joules agent: the %s gave no reading (%s): %s (the platform's power) is left out until it answers; "
                "polls go on every %g s and later failures are not said",
                self.label,
                why,
                self.domain_id,
                self.poll_interval_s,
            )

    def close(self) -> None:
        """Stop polling; waits at most a moment for the poller (a request in flight is left to its daemon thread)."""
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 0.5)


class BmcChannel(Channel):
    """A BMC's platform reading as a counter of microjoules, from its poller's latest reading (never waiting for the BMC).

    Args:
        domain: Its domain (method counter where the BMC counts energy, else power_integration).
        poller: The BMC's poller.
        timeout_s: One request's timeout (how stale a reading may get: :func:`max_age_s`).
        clock: Monotonic seconds, the poller's clock.
        owns_poller: :meth:`close` stops the poller (False for a :meth:`sharing_poller` channel).
    """

    def __init__(
        self,
        domain: Domain,
        poller: BmcPoller,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        owns_poller: bool = True,
    ) -> None:
        super().__init__(domain)
        self._poller = poller
        self._timeout_s = timeout_s
        self._owns_poller = owns_poller
        self._clock = clock
        self._max_age_s = max_age_s(poller.poll_interval_s, timeout_s)
        self._counter = domain.method is Method.COUNTER
        self._integral = PowerIntegral()
        self._base_uj = 0
        self._last_uj: int | None = None
        self._away = False
        self._offset_j = 0.0
        self._last_energy_j: float | None = None

    @property
    def may_be_away(self) -> bool:
        """True: while the BMC has no recent reading, the domain is left out rather than read as zero."""
        return True

    @property
    def max_read_interval_s(self) -> float | None:
        """The integration step for an integrated power reading; None for the BMC's own counter."""
        return None if self._counter else POWER_SAMPLE_PERIOD_S

    @property
    def poller(self) -> BmcPoller:
        """The BMC's poller (its latest reading and failure)."""
        return self._poller

    def read_uj(self) -> int | None:  # type: ignore[override]
        """Microjoules so far, or None while the BMC has no reading younger than :func:`max_age_s`."""
        now_s = self._clock()
        sample = self._poller.latest()
        if sample is None or now_s - sample.time_s > self._max_age_s or (self._counter and sample.reading.energy_joules is None):
            if self._last_uj is None and not self._counter:
                self._last_uj = 0  # the integral's origin: the meter's first read, with no power yet
                return 0
            self._away = True
            return None
        if self._counter:
            value = self._counted_uj(sample, now_s)
        else:
            if self._away:
                # Back after a time with no reading: that time is not integrated (its power is not known).
                self._base_uj, self._integral = self._last_uj or 0, PowerIntegral()
            value = self._base_uj + self._integral.add(sample.power_watts or 0.0, now_s)
        self._away = False
        self._last_uj = value
        return value

    def _counted_uj(self, sample: BmcSample, now_s: float) -> int:
        energy_j = sample.reading.energy_joules
        assert energy_j is not None
        if self._last_energy_j is not None and energy_j < self._last_energy_j:
            self._offset_j += self._last_energy_j  # the BMC's counter restarted: counted on from its new value
        self._last_energy_j = energy_j
        # Carried forward at the latest power for at most one poll: the value of now, not of the last poll.
        held_s = min(max(now_s - sample.time_s, 0.0), self._poller.poll_interval_s)
        value = round((self._offset_j + energy_j + (sample.power_watts or 0.0) * held_s) * 1e6)
        return max(value, self._last_uj or 0)  # a counter never goes back

    def sharing_poller(self) -> "BmcChannel":
        """A second channel over this one's poller, with a state of its own, for a second reader in another thread
        (the agent serves the reading to its clients while its hw.* publisher reads it): one BMC session and one
        poll per interval for both, and neither reader's integral or counter offset disturbs the other's. Its
        :meth:`close` leaves the poller to this channel."""
        return BmcChannel(self.domain, self._poller, self._timeout_s, self._clock, owns_poller=False)

    def close(self) -> None:
        """Stop the poller (where this channel owns it)."""
        if self._owns_poller:
            self._poller.close()


def _domain(target: BmcTarget, method: Method, poll_interval_s: float, source: str) -> Domain:
    return Domain(
        id=target.domain_id,
        kind=KIND_PLATFORM,
        hw_name=target.label,
        hw_id=target.hw_id,
        method=method,
        update_period_s=poll_interval_s,
        source=source,
        covers=BMC_COVERS,
        breadth=Breadth.BMC,
    )


def open_target(target: BmcTarget, config: BmcConfig, clock: Callable[[], float] = time.monotonic) -> BmcChannel:
    """Start polling one BMC and make its channel; waits for the first poll at most one timeout (and a little).

    Where the first poll gives an energy counter, the channel counts it; else (no answer yet included) it
    integrates power.
    """
    reader = target.make_reader()
    poller = BmcPoller(target.label, target.domain_id, reader, config.poll_interval_s, config.timeout_s, clock)
    first = poller.wait_first(config.timeout_s + 0.5)
    counter = first is not None and first.reading.energy_joules is not None
    resource = getattr(reader, "resource", None)
    protocol = "Redfish" if target.domain_id == REDFISH_DOMAIN else "IPMI DCMI"
    source = f"BMC ({protocol}" + (f", {resource}" if resource else "") + ")"
    method = Method.COUNTER if counter else Method.POWER_INTEGRATION
    return BmcChannel(_domain(target, method, config.poll_interval_s, source), poller, config.timeout_s, clock)


def discover(path: str) -> Discovery:
    """A channel per BMC in the file at ``path``, each polled from now on.

    Raises:
        ConfigurationError: the file is not private or not a valid BMC file. A BMC that does not answer is no
            error: its channel waits for it, and its poller says so once.
    """
    config = load_config(path)
    found = Discovery()
    for target in config.targets:
        channel = open_target(target, config)
        found.channels.append(channel)
        _log.warning(
            "otel-joules agent: reading the platform's power from the %s every %g s (timeout %g s) as %s (%s)",
            target.label,
            config.poll_interval_s,
            config.timeout_s,
            target.domain_id,
            channel.domain.method.value,
        )
    return found
