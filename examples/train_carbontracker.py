"""Train a small model on the CPU with carbontracker's API, measured by otel-joules.

Run: ``python examples/train_carbontracker.py [--epochs 5] [--log-dir logs/]``. It takes a
few seconds. The only change from a carbontracker script is the import prefix::

    from otel_joules.carbontracker.tracker import CarbonTracker   # was: from carbontracker.tracker import ...

The model is a two-layer perceptron trained with numpy (plain Python if numpy is
missing) on a synthetic two-class problem. With readable RAPL counters (or GPUs) the
energy is measured; elsewhere it is estimated, and the console says so. Afterwards
``otel-joules report LOG_DIR`` or ``python -c "from otel_joules.carbontracker import parser;
parser.print_aggregate('LOG_DIR')"`` aggregates the logs. The last line printed is a
JSON summary (for scripts and the test that runs this example).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from typing import Callable

from otel_joules.carbontracker.tracker import CarbonTracker


def _numpy_trainer(samples: int, hidden: int, seed: int) -> Callable[[], float]:
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, 8))
    y = ((x[:, 0] * x[:, 1] + np.sin(x[:, 2])) > 0).astype(float)[:, None]
    w1 = rng.normal(scale=0.5, size=(8, hidden))
    w2 = rng.normal(scale=0.5, size=(hidden, 1))
    rate = 0.5

    def epoch() -> float:
        nonlocal w1, w2
        loss = 0.0
        for start in range(0, samples, 256):
            xb, yb = x[start : start + 256], y[start : start + 256]
            h = np.tanh(xb @ w1)
            p = 1.0 / (1.0 + np.exp(-(h @ w2)))
            loss += float(-np.sum(yb * np.log(p + 1e-9) + (1 - yb) * np.log(1 - p + 1e-9)))
            grad_out = (p - yb) / len(xb)
            grad_w2 = h.T @ grad_out
            grad_h = (grad_out @ w2.T) * (1 - h**2)
            w1 -= rate * (xb.T @ grad_h)
            w2 -= rate * grad_w2
        return loss / samples

    return epoch


def _python_trainer(samples: int, seed: int) -> Callable[[], float]:
    # Logistic regression in plain Python: slower, so fewer samples.
    rng = random.Random(seed)
    data = []
    for _ in range(samples // 8):
        features = [rng.gauss(0, 1) for _ in range(4)]
        data.append((features, 1.0 if features[0] + 0.5 * features[1] > 0 else 0.0))
    weights = [0.0] * 5

    def epoch() -> float:
        loss = 0.0
        for features, label in data:
            z = weights[4] + sum(w * f for w, f in zip(weights, features))
            p = 1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0)))
            loss -= label * math.log(p + 1e-9) + (1 - label) * math.log(1 - p + 1e-9)
            for i, f in enumerate(features):
                weights[i] -= 0.05 * (p - label) * f
            weights[4] -= 0.05 * (p - label)
        return loss / len(data)

    return epoch


def main(argv: list[str] | None = None) -> int:
    """Train, print carbontracker's console output, then one JSON summary line."""
    args_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args_parser.add_argument("--epochs", type=int, default=5)
    args_parser.add_argument("--samples", type=int, default=600_000)  # epochs of ~0.2 s: above the CPU-time estimate's 0.1 s resolution
    args_parser.add_argument("--log-dir", default=None, help="write carbontracker-format logs here")
    args = args_parser.parse_args(argv)

    try:
        train_epoch = _numpy_trainer(args.samples, hidden=64, seed=1)
    except ImportError:
        train_epoch = _python_trainer(args.samples, seed=1)

    tracker = CarbonTracker(epochs=args.epochs, log_dir=args.log_dir, components="all")
    losses = []
    for _ in range(args.epochs):
        tracker.epoch_start()
        losses.append(train_epoch())
        tracker.epoch_end()
    result = tracker.stop()

    actual = result.actual
    print(
        json.dumps(
            {
                "epochs": actual.epochs if actual else 0,
                "duration_s": actual.duration_s if actual else 0.0,
                "energy_joules": actual.energy_joules if actual else 0.0,
                "energy_kwh": actual.energy_kwh if actual else 0.0,
                "co2eq_grams": actual.co2eq_grams if actual else 0.0,
                "intensity_source": actual.intensity_source if actual else None,
                "first_loss": losses[0],
                "final_loss": losses[-1],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
