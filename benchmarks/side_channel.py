"""The agent's power side channel, measured: how many bits of a secret power pattern a group member recovers.

A victim draws power in a secret pattern of random bits in 1 ms slots (:data:`PATTERN_BITS` bits,
repeating: :data:`BASE_WATTS` for a 0, :data:`BASE_WATTS` + :data:`BIT_WATTS` for a 1) on a fake
powercap tree in a temp dir; a separate process advances its ``energy_uj`` every
:data:`VICTIM_UPDATE_S`, as RAPL's ~1 ms update does. An agent serves the tree; the attacker, a member
of the agent's group, subscribes on its socket, takes each pushed reading with its arrival time for
``--seconds``, and recovers the pattern by least squares: each pair of readings is the energy of the
slots between its two read instants, folded by time modulo the pattern's period (61 ms), with the
read instants as well as the attacker can estimate them. Bits recovered are those of the pattern it
gets right, out of :data:`PATTERN_BITS` (a guess gets about half: 30.5 +- 3.9).

The attacker is as strong as it gets here: it knows the pattern's period and phase (it triggered the
victim), the counter carries nothing but the victim's power (no other load, no noise), and it
is granted the constant part of its timing error (its own latency, which a real attacker calibrates with a load
of its own), so only the spread of its timing estimate blurs the pattern. Two agents:

- ``fixed-grid``: the agent before issue 34's changes, built in this process's child from the real
  :class:`~otel_joules.agent.AgentServer` with readings at 1 µJ, read at the start of each interval and
  published at once (``chance=lambda: 0.0``; the command line has no such option);
- ``randomised``: the real ``otel-joules agent`` process: readings floored to 1 mJ, read at a random
  instant within each interval and published after a further random fraction of one.

``--agents fixed-grid-1mJ`` adds the fixed grid with the 1 mJ floor alone. The attacker tries two timing
estimates: each read at its arrival (less half an interval for the randomised agent), and the agent's grid
fitted to the arrivals (rolling median): each read at its grid instant for the fixed grid, somewhere in its
interval of the grid, weighted by where it may lie, for the randomised agent.
The error of a timing estimate is measured against the true read instant, which the benchmark (not
the attacker) recovers from the reading's value: the victim's energy is a known function of time.
``--simulate-seconds S`` adds the attack on S seconds of the randomised agent's timing simulated
without the host's scheduler (far more readings than a run's budget allows).

    python -m benchmarks.side_channel [--seconds 35] [--interval-ms 10] [--agents fixed-grid,randomised]
                                      [--simulate-seconds S] [--seed N] [--json]
    # from the repository root (it imports tests.fakes); about 90 s by default
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from otel_joules.config import OTEL_JOULES_SYSFS_ROOT, Settings
from otel_joules.sensors.agent_protocol import MAX_REPLY_BYTES, OP_SUBSCRIBE, PROTOCOL_VERSION, decode_frames, encode
from tests.fakes.powercap import make_powercap, urgent

#: The secret pattern's length in 1 ms slots (the period it repeats with), as in the review of issue 34.
PATTERN_BITS = 61
SLOT_S = 0.001
BASE_WATTS = 20.0
BIT_WATTS = 10.0
#: How often the victim's counter moves (RAPL updates about every 1 ms).
VICTIM_UPDATE_S = 0.0005
AGENTS = ("fixed-grid", "randomised", "fixed-grid-1mJ")


@dataclass(frozen=True)
class Victim:
    """The secret pattern and the energy it has drawn by any time: ``t0_ns`` (CLOCK_MONOTONIC) is its slot 0."""

    bits: tuple[int, ...]
    t0_ns: int

    def energy_uj(self, t_s: float) -> float:
        """Microjoules drawn from ``t0`` to ``t_s`` seconds after it."""
        ones = sum(self.bits)
        slots, fraction = divmod(t_s / SLOT_S, 1.0)
        periods, slot = divmod(int(slots), len(self.bits))
        ones_before = periods * ones + sum(self.bits[:slot])
        extra_s = (ones_before + self.bits[slot] * fraction) * SLOT_S
        return (BASE_WATTS * t_s + BIT_WATTS * extra_s) * 1e6

    def read_at_s(self, value_uj: int, resolution_uj: int, horizon_s: float) -> float:
        """When a reading of ``value_uj`` (floored to ``resolution_uj``) was taken: the middle of the instants the
        counter held a value in [value, value + resolution)."""

        def first_reaching(target_uj: float) -> float:
            low, high = 0.0, horizon_s
            for _ in range(60):
                middle = (low + high) / 2
                if self.energy_uj(middle) < target_uj:
                    low = middle
                else:
                    high = middle
            return high

        return (first_reaching(value_uj) + first_reaching(value_uj + resolution_uj)) / 2


def run_victim(energy_file: str, bits_hex: str, t0_ns: int) -> None:
    """The victim's process: write the pattern's energy into ``energy_file`` every :data:`VICTIM_UPDATE_S`."""
    urgent()
    bits = tuple(int(b) for b in bin(int(bits_hex, 16))[2:].zfill(PATTERN_BITS))
    victim = Victim(bits, t0_ns)
    fd = os.open(energy_file, os.O_WRONLY)
    while True:
        t_s = (time.monotonic_ns() - t0_ns) / 1e9
        # Whole and in place, as the fake tree's own writes: the agent preads it.
        os.pwrite(fd, f"{int(victim.energy_uj(max(t_s, 0.0)))}\n".ljust(24).encode(), 0)
        time.sleep(VICTIM_UPDATE_S)


def run_fixed_grid_agent(socket_path: str, sysfs_root: str, interval_ms: float, resolution_uj: int) -> None:
    """The fixed-grid agent's process: the real AgentServer, read at each interval's start, published at once."""
    from otel_joules.agent import AgentServer
    from otel_joules.sensors import rapl

    urgent()
    channels = list(rapl.discover(Settings(sysfs_root=sysfs_root)).channels)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        listener.bind(socket_path)
    finally:
        os.umask(old_umask)
    listener.listen(16)
    server = AgentServer(listener, channels, os.getgid(), "benchmark", interval_ms / 1e3, resolution_uj=resolution_uj,
                         chance=lambda: 0.0)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    server.run()


@dataclass
class Readings:
    """What the attacker saw: each pushed reading's arrival (seconds after the victim's t0) and value (µJ)."""

    arrivals_s: list[float]
    values_uj: list[int]


def attack(socket_path: str, victim: Victim, seconds: float) -> Readings:
    """Subscribe as a member and keep every pushed reading with its arrival time for ``seconds``."""
    urgent()  # as timely as this host lets it be (root: nice -15), as the agents and the victim
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(socket_path)
    client.sendall(encode({"op": OP_SUBSCRIBE, "version": PROTOCOL_VERSION}))
    buffer = bytearray()
    messages: list[dict] = []
    while len(messages) < 2:  # the answer, then the latest reading (published before we came: its arrival says nothing)
        buffer += client.recv(MAX_REPLY_BYTES)
        messages += decode_frames(buffer, MAX_REPLY_BYTES)
    if not messages[0].get("ok"):
        raise SystemExit(f"the agent refused the attacker: {messages[0]}")
    arrivals_s: list[float] = []
    values_uj: list[int] = []
    for message in messages[2:]:
        arrivals_s.append((time.monotonic_ns() - victim.t0_ns) / 1e9)
        values_uj.append(message["uj"][0])
    end_s = time.monotonic() + seconds
    while time.monotonic() < end_s:
        chunk = client.recv(MAX_REPLY_BYTES)
        arrived_s = (time.monotonic_ns() - victim.t0_ns) / 1e9
        if not chunk:
            raise SystemExit("the agent closed the attacker's connection")
        buffer += chunk
        for message in decode_frames(buffer, MAX_REPLY_BYTES):
            arrivals_s.append(arrived_s)
            values_uj.append(message["uj"][0])
    client.close()
    return Readings(arrivals_s, values_uj)


# -- recovery ---------------------------------------------------------------------------------------


def _box_row(start_s: float, end_s: float) -> list[float]:
    """Seconds of [start, end] in each phase slot of the pattern."""
    row = [0.0] * PATTERN_BITS
    slot = int(start_s // SLOT_S)
    while slot * SLOT_S < end_s:
        overlap = min(end_s, (slot + 1) * SLOT_S) - max(start_s, slot * SLOT_S)
        if overlap > 0:
            row[slot % PATTERN_BITS] += overlap
        slot += 1
    return row


def _ramp_integral(x: float, width: float) -> float:
    """The integral from -inf to ``x`` of clip(u / width, 0, 1) du."""
    if x <= 0:
        return 0.0
    if x <= width:
        return x * x / (2 * width)
    return width / 2 + (x - width)


def _ramp_row(start_s: float, end_s: float, width_s: float) -> list[float]:
    """Expected seconds in each phase slot between two reads each uniform in [start, start + width] and [end,
    end + width]: the chance that an instant lies between them, integrated over each slot."""
    row = [0.0] * PATTERN_BITS
    slot = int(start_s // SLOT_S)
    while slot * SLOT_S < end_s + width_s:
        a, b = slot * SLOT_S, (slot + 1) * SLOT_S
        weight = (_ramp_integral(b - start_s, width_s) - _ramp_integral(a - start_s, width_s)) - (
            _ramp_integral(b - end_s, width_s) - _ramp_integral(a - end_s, width_s)
        )
        row[slot % PATTERN_BITS] += weight
        slot += 1
    return row


def _solve(rows: Sequence[Sequence[float]], joules: Sequence[float]) -> tuple[list[float], float]:
    """Least squares: each slot's watts, and the residual's sum of squares (normal equations, Gaussian elimination)."""
    n = PATTERN_BITS
    normal = [[0.0] * n for _ in range(n)]
    rhs = [0.0] * n
    for row, y in zip(rows, joules):
        nonzero = [(k, w) for k, w in enumerate(row) if w]
        for k, w in nonzero:
            rhs[k] += w * y
            line = normal[k]
            for j, v in nonzero:
                line[j] += w * v
    matrix = [line[:] + [r] for line, r in zip(normal, rhs)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(matrix[r][col]))
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        if abs(matrix[col][col]) < 1e-18:
            continue
        for r in range(n):
            if r != col and matrix[r][col]:
                factor = matrix[r][col] / matrix[col][col]
                matrix[r] = [x - factor * p for x, p in zip(matrix[r], matrix[col])]
    watts = [matrix[k][n] / matrix[k][k] if abs(matrix[k][k]) >= 1e-18 else 0.0 for k in range(n)]
    residual = sum((sum(w * x for w, x in zip(row, watts)) - y) ** 2 for row, y in zip(rows, joules))
    return watts, residual


def _robust_solve(rows: Sequence[Sequence[float]], joules: Sequence[float], rounds: int = 3) -> list[float]:
    """Least squares that drops the readings which fit worst (beyond 3 robust standard deviations) and fits again:
    a reading the attacker timed wrong (its own process descheduled, frames arriving together) weighs nothing."""
    kept = list(range(len(rows)))
    watts: list[float] = []
    for _ in range(rounds):
        watts, _residual = _solve([rows[i] for i in kept], [joules[i] for i in kept])
        errors = {i: sum(w * x for w, x in zip(rows[i], watts)) - joules[i] for i in kept}
        spread = 1.4826 * statistics.median(abs(e) for e in errors.values())
        trimmed = [i for i in kept if abs(errors[i]) <= 3 * spread]
        if len(trimmed) == len(kept) or len(trimmed) < 4 * PATTERN_BITS:
            break
        kept = trimmed
    return watts


def _bits(watts: Sequence[float]) -> list[int]:
    """Each slot high or low: split the sorted estimates where the two groups are tightest (Otsu)."""
    ordered = sorted(watts)
    best_cut, best_spread = ordered[0], float("inf")
    for i in range(1, len(ordered)):
        low, high = ordered[:i], ordered[i:]
        spread = sum((x - statistics.fmean(low)) ** 2 for x in low) + sum((x - statistics.fmean(high)) ** 2 for x in high)
        if spread < best_spread:
            best_cut, best_spread = (ordered[i - 1] + ordered[i]) / 2, spread
    return [int(w > best_cut) for w in watts]


def recover(readings: Readings, victim: Victim, interval_s: float, resolution_uj: int, randomised: bool) -> dict:
    """The attacker's best recovery from ``readings``, with how far its timing estimate was from the truth."""
    arrivals, values = readings.arrivals_s, readings.values_uj
    joules = [(b - a) / 1e6 for a, b in zip(values, values[1:])]
    horizon_s = arrivals[-1] + 1.0
    true_s = [victim.read_at_s(v, resolution_uj, horizon_s) for v in values]
    # Each estimate of the read instants as the attacker's model of the agent has it: the fixed grid publishes a
    # reading as it reads it; the randomised agent publishes it half an interval later on average.
    estimators: dict[str, list[float]] = {"arrival": [a - (interval_s / 2 if randomised else 0.0) for a in arrivals]}
    # The agent's grid: readings are numbered from the subscription, and arrival - i x interval is the grid's start
    # plus the read instant within the interval, the delay and the latency: its rolling median is steadier than
    # any one arrival (the randomised agent's read instant and delay each add up to an interval: less one).
    offsets = [a - i * interval_s for i, a in enumerate(arrivals)]
    half = 50
    grid = []
    for i in range(len(arrivals)):
        window = sorted(offsets[max(0, i - half) : i + half + 1])
        grid.append(window[len(window) // 2] - (interval_s if randomised else 0.0) + i * interval_s)
    estimators["agent grid"] = grid
    outcomes = {}
    for name, starts in estimators.items():
        ramp = randomised and name == "agent grid"  # each read anywhere in its interval of the grid
        expected = [t + interval_s / 2 for t in starts] if ramp else starts  # where a read is expected
        # The attacker is granted its constant latency (what a real one calibrates with a load of its own): only
        # the spread of its timing estimate is left to blur the pattern.
        bias_s = statistics.fmean(e - t for e, t in zip(expected, true_s))
        starts = [t - bias_s for t in starts]
        expected = [t - bias_s for t in expected]
        if ramp:
            rows = [_ramp_row(a, b, interval_s) for a, b in zip(starts, starts[1:])]
        else:
            rows = [_box_row(a, b) for a, b in zip(starts, starts[1:])]
        watts = _robust_solve(rows, joules)
        recovered = _bits(watts)
        errors_ms = [(e - t) * 1e3 for e, t in zip(expected, true_s)]
        median_ms = statistics.median(errors_ms)
        outcomes[name] = {
            "bits_recovered": sum(int(r == b) for r, b in zip(recovered, victim.bits)),
            "latency_granted_ms": bias_s * 1e3,
            "timing_error_sd_ms": statistics.pstdev(errors_ms),
            # The spread of most estimates (1.4826 x the median absolute deviation): a stall's few outliers left out.
            "timing_error_robust_sd_ms": 1.4826 * statistics.median(abs(e - median_ms) for e in errors_ms),
        }
    gaps_ms = [(b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:])]
    best_name = max(outcomes, key=lambda n: (outcomes[n]["bits_recovered"], -outcomes[n]["timing_error_sd_ms"]))
    return {
        "readings": len(values),
        "arrival_gap_mean_ms": statistics.fmean(gaps_ms),
        "arrival_gap_sd_ms": statistics.pstdev(gaps_ms),
        "estimators": outcomes,
        "best": best_name,
        "bits_recovered": outcomes[best_name]["bits_recovered"],
    }


# -- the run ----------------------------------------------------------------------------------------


def _start(command: Sequence[str], env: dict[str, str], socket_path: str | None = None) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if socket_path is not None:
        deadline = time.monotonic() + 30
        while not os.path.exists(socket_path):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"{command[-1]} did not start: {process.communicate()[1].decode(errors='replace')}")
            time.sleep(0.05)
    return process


def _urgent_process(pid: int) -> None:
    """The same priority for the real agent as for the fixed-grid one (``urgent`` in its own process)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(task), -15)
        except OSError:
            pass


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    if process.stderr is not None:
        process.stderr.close()


def measure(agent: str, seconds: float, interval_ms: float, secret: random.Random) -> dict:
    """One agent's run: a fresh secret, victim, agent and attacker; what the attacker recovered."""
    bits = tuple(secret.randrange(2) for _ in range(PATTERN_BITS))
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o711)
        tree = make_powercap(Path(tmp) / "sys", "psys_only")
        energy_file = tree.zones["psys"].path / "energy_uj"
        runtime = Path(tmp) / "run"
        socket_path = str(runtime / "agent.sock")
        env = {**os.environ, OTEL_JOULES_SYSFS_ROOT: tree.sysfs_root, "OTEL_METRICS_EXPORTER": "none"}
        victim = Victim(bits, time.monotonic_ns())
        me = [sys.executable, "-m", "benchmarks.side_channel"]
        victim_process = _start([*me, "--victim", str(energy_file), hex(int("".join(map(str, bits)), 2)), str(victim.t0_ns)], env)
        agent_process = None
        try:
            if agent == "randomised":
                resolution_uj = 1000
                agent_process = _start(
                    [sys.executable, "-m", "otel_joules.cli.main", "agent", "--socket", socket_path, "--group",
                     str(os.getgid()), "--min-interval-ms", f"{interval_ms:g}"], env, socket_path)
                _urgent_process(agent_process.pid)
            else:
                resolution_uj = 1000 if agent == "fixed-grid-1mJ" else 1
                runtime.mkdir(mode=0o700)
                agent_process = _start(
                    [*me, "--fixed-grid-agent", socket_path, tree.sysfs_root, f"{interval_ms:g}", str(resolution_uj)],
                    env, socket_path)
            time.sleep(0.5)  # the victim's counter and the agent's loop running
            readings = attack(socket_path, victim, seconds)
        finally:
            if agent_process is not None:
                _stop(agent_process)
            _stop(victim_process)
    result = recover(readings, victim, interval_ms / 1e3, resolution_uj, randomised=agent == "randomised")
    return {"agent": agent, "seconds": seconds, "interval_ms": interval_ms, "resolution_uj": resolution_uj, **result}


def simulate(seconds: float, interval_ms: float, secret: random.Random) -> dict:
    """The randomised agent's timing alone, simulated with no scheduler in the way: reads at a uniform instant in
    each interval, published a uniform fraction of one later (in order), values floored to 1 mJ, arrivals 0.2 ms
    after publication. What the attack gets with as many readings as ``seconds`` gives, free of the host's noise."""
    interval_s = interval_ms / 1e3
    bits = tuple(secret.randrange(2) for _ in range(PATTERN_BITS))
    victim = Victim(bits, 0)
    chance = random.Random(secret.random())
    reads_s = [0.5 + (i + chance.random()) * interval_s for i in range(int(seconds / interval_s))]
    arrivals_s: list[float] = []
    for read_s in reads_s:
        arrivals_s.append(max(read_s + chance.random() * interval_s, arrivals_s[-1] if arrivals_s else 0.0))
    arrivals_s = [a + 0.0002 for a in arrivals_s]
    values_uj = [int(victim.energy_uj(t)) // 1000 * 1000 for t in reads_s]
    result = recover(Readings(arrivals_s, values_uj), victim, interval_s, 1000, randomised=True)
    return {"agent": "randomised (simulated)", "seconds": seconds, "interval_ms": interval_ms, "resolution_uj": 1000, **result}


def main(argv: Sequence[str] | None = None) -> int:
    """Measure each agent in turn and print what the attacker recovered."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=35.0, help="how long the attacker collects readings, per agent")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="the agent's --min-interval-ms")
    parser.add_argument("--agents", default="fixed-grid,randomised", help=f"comma-separated, of {', '.join(AGENTS)}")
    parser.add_argument("--seed", type=int, default=None, help="the secret patterns' seed (random by default)")
    parser.add_argument("--simulate-seconds", type=float, default=0.0,
                        help="also attack this many seconds of the randomised agent's readings, simulated (no host noise)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--victim", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--fixed-grid-agent", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.victim:
        run_victim(args.victim[0], args.victim[1], int(args.victim[2]))
        return 0
    if args.fixed_grid_agent:
        path, root, interval_ms, resolution_uj = args.fixed_grid_agent
        run_fixed_grid_agent(path, root, float(interval_ms), int(resolution_uj))
        return 0
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    unknown = sorted(set(agents) - set(AGENTS))
    if unknown:
        parser.error(f"--agents: unknown {', '.join(unknown)}; give some of {', '.join(AGENTS)}")
    secret = random.Random(args.seed) if args.seed is not None else random.SystemRandom()
    results = [measure(agent, args.seconds, args.interval_ms, secret) for agent in agents]
    if args.simulate_seconds:
        results.append(simulate(args.simulate_seconds, args.interval_ms, secret))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"a {PATTERN_BITS}-bit pattern in 1 ms slots ({BASE_WATTS:g} W / {BASE_WATTS + BIT_WATTS:g} W), "
          f"readings every {args.interval_ms:g} ms for {args.seconds:g} s; a guess gets ~{PATTERN_BITS / 2:.1f} bits")
    for result in results:
        print(f"{result['agent']} agent ({result['resolution_uj']} uJ resolution): {result['readings']} readings over "
              f"{result['seconds']:g} s, arrivals "
              f"{result['arrival_gap_mean_ms']:.1f} +- {result['arrival_gap_sd_ms']:.1f} ms apart")
        for name, outcome in result["estimators"].items():
            print(f"  read instants estimated by {name}: {outcome['bits_recovered']}/{PATTERN_BITS} bits recovered; "
                  f"timing error {outcome['timing_error_robust_sd_ms']:.2f} ms (robust sd; sd "
                  f"{outcome['timing_error_sd_ms']:.2f} ms; its constant part, "
                  f"{outcome['latency_granted_ms']:+.2f} ms, granted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
