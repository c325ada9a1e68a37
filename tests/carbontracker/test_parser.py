"""Our carbontracker parser against known values, against carbontracker 2.4.7's parser (the
oracle where it is right), and on the logs where carbontracker's parser is wrong."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from carbontracker import parser as ct_parser

from otel_joules.carbontracker import parser
from otel_joules.carbontracker.logs import (
    CarbonTrackerLogWriter,
    LogFilesNotFoundError,
    LogFormatError,
)
from otel_joules.carbontracker.parser import SkippedLogWarning
from otel_joules.errors import OtelJoulesError

from tests.helpers.carbontracker_oracle import carbontracker_logger, log_components, log_epoch, output_energy

NEW_YEAR_UTC = 1767225600.0
# carbontracker's figures when it runs offline: world-average intensity, PUE, EEA car.
WORLD_AVERAGE_G_PER_KWH = 445.0
CARBONTRACKER_PUE = 1.58
G_PER_KM_BY_CAR = 106.8


def writer(log_dir: Path, run_id: int, prefix: str = "") -> CarbonTrackerLogWriter:
    return CarbonTrackerLogWriter(log_dir, prefix, pid=1000, run_id=run_id, clock=lambda: NEW_YEAR_UTC)


def write_run(
    log_dir: Path,
    run_id: int,
    *,
    components: dict,
    epochs: list[tuple[float, dict]],
    pred: tuple | None = None,
    actual: tuple | None = None,
    early_stop_of: int | None = None,
) -> CarbonTrackerLogWriter:
    """A run written by our writer. ``pred``/``actual``: (epochs, seconds, kwh, grams, km or None)."""
    out = writer(log_dir, run_id)
    out.write_header(components, version="0.1.0")
    for number, (seconds, power) in enumerate(epochs, start=1):
        out.write_epoch(number, duration_seconds=seconds, power_watts=power)
    for kind, block in (("predicted", pred), ("actual", actual)):
        if block is None:
            continue
        count, seconds, kwh, grams, km = block
        if kind == "actual":
            if early_stop_of is not None:
                out.write_early_stop(early_stop_of)
            out.write_average_intensity(grams / kwh if kwh else 0.0)
        out.write_consumption(
            kind, epochs=count, duration_seconds=seconds, energy_kwh=kwh, co2eq_grams=grams,
            equivalents=None if km is None else {"km travelled by car": km},
        )
    out.write_finished()
    return out


# ----------------------------------------------------------- our writer, both parsers

COMPONENTS = {"gpu": ["Tesla T4", "Tesla V100"], "cpu": ["cpu:0", "dram:0"]}
# Two GPUs at 300 W and 100 W: the component's power is their sum.
EPOCHS = [
    (10.0, {"gpu": 300.0 + 100.0, "cpu": 1.2e-05}),
    (12.5, {"gpu": 400.0, "cpu": 75.25}),
    (7.25, {"gpu": 350.5, "cpu": 80.0}),
]


@pytest.fixture
def our_run(tmp_path: Path) -> Path:
    write_run(
        tmp_path,
        1,
        components=COMPONENTS,
        epochs=EPOCHS,
        pred=(3, 29.75, 0.004, 1.78, 1.78 / G_PER_KM_BY_CAR),
        actual=(3, 29.75, 1.2e-05, 0.00534, 0.00534 / G_PER_KM_BY_CAR),
    )
    return tmp_path


def test_our_logs_read_back_exactly(our_run: Path) -> None:
    (entry,) = parser.parse_all_logs(our_run)
    assert entry["standard_filename"] == str(our_run / "1000.1_2026-01-01T000000Z_carbontracker.log")
    assert entry["output_filename"] == str(our_run / "1000.1_2026-01-01T000000Z_carbontracker_output.log")
    assert entry["early_stop"] is False
    assert list(entry["components"]) == ["gpu", "cpu"]
    gpu, cpu = entry["components"]["gpu"], entry["components"]["cpu"]
    assert gpu["devices"] == ["Tesla T4", "Tesla V100"]
    assert cpu["devices"] == ["cpu:0", "dram:0"]
    durations = [seconds for seconds, _ in EPOCHS]
    for name, arrays in entry["components"].items():
        watts = [power[name] for _, power in EPOCHS]
        assert arrays["epoch_durations (s)"].tolist() == durations
        assert arrays["avg_power_usages (W)"].tolist() == [[w] for w in watts]
        assert arrays["avg_energy_usages (J)"].tolist() == [[w * s] for w, s in zip(watts, durations)]
    assert gpu["avg_energy_usages (J)"].sum() == 4000.0 + 5000.0 + 2541.125
    assert cpu["avg_power_usages (W)"][0, 0] == 1.2e-05
    assert entry["pred"] == {
        "epochs": 3, "duration (s)": 30.0, "energy (kWh)": 0.004, "co2eq (g)": 1.78,
        "equivalents": {"km travelled by car": round(1.78 / G_PER_KM_BY_CAR, 12)},
    }
    assert entry["actual"] == {
        "epochs": 3, "duration (s)": 30.0, "energy (kWh)": 1.2e-05, "co2eq (g)": 0.00534,
        "equivalents": {"km travelled by car": round(0.00534 / G_PER_KM_BY_CAR, 12)},
    }


def test_carbontrackers_parser_reads_our_values(our_run: Path) -> None:
    ours, theirs = parser.parse_all_logs(our_run), ct_parser.parse_all_logs(str(our_run))
    assert len(ours) == len(theirs) == 1
    ours, theirs = ours[0], theirs[0]
    for key in ("standard_filename", "output_filename", "early_stop", "pred"):
        assert ours[key] == theirs[key], key
    assert set(ours["components"]) == set(theirs["components"])
    for name, arrays in ours["components"].items():
        for key in ("avg_power_usages (W)", "avg_energy_usages (J)", "epoch_durations (s)"):
            np.testing.assert_array_equal(arrays[key], theirs["components"][name][key])
        # carbontracker keeps the space after each comma
        assert arrays["devices"] == [d.strip() for d in theirs["components"][name]["devices"]]
    # Everything in the actual block agrees but the epoch count, which carbontracker misreads.
    assert {k: v for k, v in ours["actual"].items() if k != "epochs"} == {
        k: v for k, v in theirs["actual"].items() if k != "epochs"
    }
    assert ours["actual"]["epochs"] == 3
    assert theirs["actual"]["epochs"] == 1


def test_parse_logs_matches_carbontracker_on_our_log(our_run: Path) -> None:
    ours = parser.parse_logs(our_run)
    theirs = ct_parser.parse_logs(str(our_run))
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_array_equal(ours[name]["avg_energy_usages (J)"], theirs[name]["avg_energy_usages (J)"])


def test_per_device_lists_dotted_names_and_early_stop(tmp_path: Path) -> None:
    write_run(
        tmp_path,
        2,
        components={"gpu": ["NVIDIA A100-SXM4-80GB.0", "NVIDIA A100-SXM4-80GB.1"], "cpu": ["Intel(R) Xeon(R) @ 2.20GHz"]},
        epochs=[(2.0, {"gpu": [300.0, 100.0], "cpu": 50.0}), (4.5, {"gpu": [250.0, 1.2e-05], "cpu": None})],
        pred=(10, 33.0, 0.5, 200.0, None),
        actual=(2, 6.5, 0.001, 0.445, None),
        early_stop_of=10,
    )
    (entry,) = parser.parse_all_logs(tmp_path)
    gpu, cpu = entry["components"]["gpu"], entry["components"]["cpu"]
    assert gpu["devices"] == ["NVIDIA A100-SXM4-80GB.0", "NVIDIA A100-SXM4-80GB.1"]
    assert cpu["devices"] == ["Intel(R) Xeon(R) @ 2.20GHz"]
    assert gpu["avg_power_usages (W)"].tolist() == [[300.0, 100.0], [250.0, 1.2e-05]]
    assert gpu["avg_energy_usages (J)"].tolist() == [[600.0, 200.0], [1125.0, 1.2e-05 * 4.5]]
    # "None" (nothing measured) is unknown, not 0 W
    assert cpu["avg_power_usages (W)"][0, 0] == 50.0 and math.isnan(cpu["avg_power_usages (W)"][1, 0])
    assert entry["early_stop"] is True
    assert entry["actual"]["epochs"] == 2 and entry["actual"]["equivalents"] is None
    assert entry["pred"]["epochs"] == 10
    # The early stop makes the actual block the run's consumption.
    assert parser.aggregate_consumption(tmp_path) == (0.001, 0.445, {})


# ------------------------------------------------------ carbontracker's own writers


def test_logs_from_carbontrackers_writers_where_its_parser_is_wrong(tmp_path: Path) -> None:
    with carbontracker_logger(tmp_path, logger_id="9") as logger:
        log_components(logger, {"gpu": ["Tesla T4", "Tesla T4"], "cpu": ["Intel.Xeon 8.x"]})
        # Older carbontracker logged per-device numpy arrays; a tiny CPU power in repr form.
        log_epoch(logger, 1, 2.0, {"gpu": [[300.0, 100.0], [300.0, 100.0]], "cpu": [1.2e-05]})
        log_epoch(logger, 2, 3.0, {"gpu": [[280.0, 120.0]], "cpu": []})  # cpu: None (too short)
        output_energy(logger, "Actual consumption for 2 epoch(s):", time_seconds=5.0, energy_kwh=0.00061,
                      co2eq_grams=0.27145, conversions=[(0.27145 / G_PER_KM_BY_CAR, "km travelled by car")],
                      decimal_precision=12)
    std_text = next(tmp_path.glob("*_carbontracker.log")).read_text()
    assert "for gpu: [300. 100.]" in std_text and "for cpu: 1.2e-05" in std_text and "for cpu: None" in std_text

    ours = parser.parse_logs(tmp_path)
    assert ours["gpu"]["devices"] == ["Tesla T4", "Tesla T4"]
    assert ours["cpu"]["devices"] == ["Intel.Xeon 8.x"]
    assert ours["gpu"]["avg_power_usages (W)"].tolist() == [[300.0, 100.0], [280.0, 120.0]]
    assert ours["gpu"]["avg_energy_usages (J)"].tolist() == [[600.0, 200.0], [840.0, 360.0]]
    assert ours["cpu"]["avg_power_usages (W)"][0, 0] == 1.2e-05
    assert math.isnan(ours["cpu"]["avg_power_usages (W)"][1, 0])

    theirs = ct_parser.parse_logs(str(tmp_path))
    assert theirs["cpu"]["devices"] == ["Intel"]  # cut at the dot
    assert theirs["gpu"]["devices"] == ["Tesla T4", " Tesla T4"]
    assert theirs["gpu"]["avg_power_usages (W)"].tolist() == [[300.0], [280.0]]  # first device only
    assert theirs["cpu"]["avg_power_usages (W)"].tolist() == [[1.2], [0.0]]  # 1.2e-05 read as 1.2, None as 0

    output_text = next(tmp_path.glob("*_carbontracker_output.log")).read_text()
    actual, pred = parser.get_consumption(output_text)
    assert pred is None
    assert actual == {"epochs": 2, "duration (s)": 5.0, "energy (kWh)": 0.00061, "co2eq (g)": 0.27145,
                      "equivalents": {"km travelled by car": round(0.27145 / G_PER_KM_BY_CAR, 12)}}
    assert ct_parser.get_consumption(output_text)[0]["epochs"] == 1


def test_numpy_wrapped_power_array_over_several_lines(tmp_path: Path) -> None:
    watts = [68.11650000001, 70.0201234, 71.2, 69.9999, 250.123456, 251.5, 252.25, 249.75]
    with carbontracker_logger(tmp_path) as logger:
        log_components(logger, {"gpu": [f"gpu{i}" for i in range(8)]})
        log_epoch(logger, 1, 1.0, {"gpu": [watts]})
        log_epoch(logger, 2, 2.0, {"gpu": [watts]})
    std_text = next(tmp_path.glob("*_carbontracker.log")).read_text()
    assert "\n 252.25" in std_text  # numpy wrapped the array onto a line without prefix
    ours = parser.parse_logs(tmp_path)["gpu"]
    expected = [round(w, 8) for w in watts]  # numpy prints up to 8 decimals
    assert ours["avg_power_usages (W)"].tolist() == [expected, expected]
    assert ours["avg_energy_usages (J)"].tolist() == [expected, [2 * w for w in expected]]


# ------------------------------------------------------------ real carbontracker runs

RUNS_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from carbontracker.tracker import CarbonTracker

    def run(prefix, epochs, monitor_epochs, sleeps, stop):
        tracker = CarbonTracker(
            epochs=epochs, monitor_epochs=monitor_epochs, log_dir=sys.argv[1] + "/" + prefix,
            log_file_prefix=prefix, update_interval=0.02, verbose=0,
            sim_gpu="NVIDIA A100.1", sim_gpu_watts=300, sim_cpu="Intel.Xeon 8.x", sim_cpu_tdp=100,
        )
        for seconds in sleeps:
            tracker.epoch_start()
            time.sleep(seconds)
            tracker.epoch_end()
        if stop:
            tracker.stop()

    run("full", 3, -1, [0.3, 0.1, 0.1], False)    # all epochs monitored
    run("partial", 4, 2, [0.1, 0.1], False)       # 2 of 4 epochs monitored
    run("early", 5, -1, [0.1, 0.1], True)         # stopped after 2 of 5
    """
)


@pytest.fixture(scope="module")
def carbontracker_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Logs of three runs of carbontracker 2.4.7 itself, with its simulated GPU and CPU, offline."""
    root = tmp_path_factory.mktemp("carbontracker_runs")
    env = dict(os.environ)
    # Its geolocation lookup must fail at once, with or without DNS: a proxy that refuses.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = "http://127.0.0.1:9"
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    subprocess.run([sys.executable, "-c", RUNS_SCRIPT, str(root)], env=env, check=True, timeout=120,
                   capture_output=True)
    return root


def test_real_carbontracker_runs_read_like_carbontracker_where_it_is_right(carbontracker_runs: Path) -> None:
    # carbontracker's stop() writes one epoch less than ran ("1 epoch(s)" after 2): we read what is written.
    for prefix, ran_epochs, written_actual_epochs in (("full", 3, 3), ("partial", 2, 2), ("early", 2, 1)):
        log_dir = carbontracker_runs / prefix
        (ours,) = parser.parse_all_logs(log_dir)
        (theirs,) = ct_parser.parse_all_logs(str(log_dir))
        for key in ("standard_filename", "output_filename", "early_stop", "pred"):
            assert ours[key] == theirs[key], (prefix, key)
        for name in ("gpu", "cpu"):
            for key in ("avg_power_usages (W)", "avg_energy_usages (J)", "epoch_durations (s)"):
                np.testing.assert_array_equal(ours["components"][name][key], theirs["components"][name][key])
        # The simulated devices draw 50% of 300 W and of 100 W.
        assert ours["components"]["gpu"]["avg_power_usages (W)"].tolist() == [[150.0]] * ran_epochs
        assert ours["components"]["cpu"]["avg_power_usages (W)"].tolist() == [[50.0]] * ran_epochs
        # Where carbontracker's parser is wrong: dotted device names and the epoch count.
        assert ours["components"]["gpu"]["devices"] == ["NVIDIA A100.1"]
        assert ours["components"]["cpu"]["devices"] == ["Intel.Xeon 8.x"]
        assert theirs["components"]["gpu"]["devices"] == ["NVIDIA A100"]
        assert theirs["components"]["cpu"]["devices"] == ["Intel"]
        assert ours["actual"]["epochs"] == written_actual_epochs
        assert theirs["actual"]["epochs"] == 1
        assert {k: v for k, v in ours["actual"].items() if k != "epochs"} == {
            k: v for k, v in theirs["actual"].items() if k != "epochs"
        }
    assert [parser.parse_all_logs(carbontracker_runs / p)[0]["early_stop"] for p in ("full", "partial", "early")] == [
        False, False, True
    ]


def test_real_carbontracker_numbers_against_known_power(carbontracker_runs: Path) -> None:
    (entry,) = parser.parse_all_logs(carbontracker_runs / "full")
    durations = entry["components"]["gpu"]["epoch_durations (s)"]
    assert len(durations) == 3
    # 150 W + 50 W for the logged durations (rounded to 0.01 s each), times its PUE.
    expected_kwh = 200.0 * durations.sum() * CARBONTRACKER_PUE / 3.6e6
    rounding_kwh = 200.0 * 0.005 * 3 * CARBONTRACKER_PUE / 3.6e6
    actual = entry["actual"]
    assert actual["energy (kWh)"] == pytest.approx(expected_kwh, abs=rounding_kwh + 1e-12)
    assert actual["co2eq (g)"] == pytest.approx(actual["energy (kWh)"] * WORLD_AVERAGE_G_PER_KWH, abs=1e-9)
    assert actual["equivalents"]["km travelled by car"] == pytest.approx(actual["co2eq (g)"] / G_PER_KM_BY_CAR, abs=1e-11)
    # The prediction extrapolates the first (long) epoch to all three.
    pred = entry["pred"]
    first_kwh = 200.0 * durations[0] * CARBONTRACKER_PUE / 3.6e6
    assert pred["epochs"] == 3
    assert pred["energy (kWh)"] == pytest.approx(3 * first_kwh, abs=3 * 200.0 * 0.005 * CARBONTRACKER_PUE / 3.6e6 + 1e-12)


def test_aggregate_of_real_runs_uses_actual_when_all_epochs_ran(carbontracker_runs: Path) -> None:
    full = parser.parse_all_logs(carbontracker_runs / "full")[0]
    # All 3 epochs were monitored: the measured consumption is the truth...
    energy, co2eq, equivalents = parser.aggregate_consumption(carbontracker_runs / "full")
    assert (energy, co2eq, equivalents) == (
        full["actual"]["energy (kWh)"], full["actual"]["co2eq (g)"], full["actual"]["equivalents"]
    )
    # ...but carbontracker reads "3 epoch(s)" as 1 and reports its prediction instead.
    assert ct_parser.aggregate_consumption(str(carbontracker_runs / "full"))[0] == full["pred"]["energy (kWh)"]
    assert full["pred"]["energy (kWh)"] > 1.5 * full["actual"]["energy (kWh)"]

    # Where carbontracker is right (a partial run: prediction; an early stop: actual) we agree.
    for prefix, key in (("partial", "pred"), ("early", "actual")):
        entry = parser.parse_all_logs(carbontracker_runs / prefix)[0]
        ours = parser.aggregate_consumption(carbontracker_runs / prefix)
        assert ours == ct_parser.aggregate_consumption(str(carbontracker_runs / prefix))
        assert ours == (entry[key]["energy (kWh)"], entry[key]["co2eq (g)"], entry[key]["equivalents"])


def test_print_aggregate_is_carbontrackers_sentence(carbontracker_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = carbontracker_runs / "partial"
    ct_parser.print_aggregate(str(log_dir))
    theirs = capsys.readouterr().out
    returned = parser.print_aggregate(log_dir)
    assert capsys.readouterr().out == theirs == returned + "\n"
    assert returned.endswith("Measured by carbontracker (https://github.com/lfwa/carbontracker).")


# -------------------------------------------------------------------- aggregate rules


def test_aggregate_picks_actual_or_prediction_per_run(tmp_path: Path) -> None:
    components = {"cpu": ["cpu:0"]}
    epoch = [(1.0, {"cpu": 10.0})]
    # (epochs, seconds, kWh, g, km)
    write_run(tmp_path, 1, components=components, epochs=epoch,
              pred=(10, 10.0, 1.0, 100.0, 1.0), actual=(10, 10.0, 0.9, 90.0, 0.9))         # all ran: actual
    write_run(tmp_path, 2, components=components, epochs=epoch,
              pred=(10, 10.0, 2.0, 200.0, 2.0), actual=(4, 4.0, 0.8, 80.0, 0.8))           # 4 of 10: prediction
    write_run(tmp_path, 3, components=components, epochs=epoch,
              pred=(10, 10.0, 1.0, 100.0, 1.0), actual=(3, 3.0, 0.3, 30.0, 0.3), early_stop_of=10)  # stopped: actual
    write_run(tmp_path, 4, components=components, epochs=epoch, pred=(5, 5.0, 0.5, 50.0, 0.5))  # only a prediction
    write_run(tmp_path, 5, components=components, epochs=epoch)                                  # nothing yet
    with pytest.warns(SkippedLogWarning, match="no consumption block"):
        energy, co2eq, equivalents = parser.aggregate_consumption(tmp_path)
    assert energy == pytest.approx(0.9 + 2.0 + 0.3 + 0.5, abs=1e-12)
    assert co2eq == pytest.approx(90.0 + 200.0 + 30.0 + 50.0, abs=1e-9)
    assert equivalents == {"km travelled by car": pytest.approx(3.7, abs=1e-12)}
    # carbontracker takes run 1's prediction (it reads "10 epoch(s)" as 1 epoch)
    assert ct_parser.aggregate_consumption(str(tmp_path))[0] == pytest.approx(3.8, abs=1e-12)

    with pytest.warns(SkippedLogWarning):
        printed = parser.print_aggregate(tmp_path)
    assert printed == (
        f"The training of models in this work is estimated to use {energy:.16f} kWh of electricity "
        f"contributing to {co2eq / 1000:.16f} kg of CO2eq. This is equivalent to "
        f"{equivalents['km travelled by car']:.16f} km travelled by car. Measured by otel-joules."
    )


def test_bare_actual_consumption_counts_epochs_from_the_standard_log(tmp_path: Path) -> None:
    out = writer(tmp_path, 1)
    out.write_header({"cpu": ["cpu:0"]})
    for number in (1, 2, 3):
        out.write_epoch(number, duration_seconds=1.0, power_watts={"cpu": 5.0})
    out.write_consumption("actual", epochs=None, duration_seconds=3.0, energy_kwh=15 / 3.6e6, co2eq_grams=0.001)
    std_text, output_text = out.std_log_path.read_text(), out.output_log_path.read_text()
    actual, pred = parser.get_consumption(output_text)
    assert pred is None and actual["epochs"] is None
    assert parser.get_consumption(output_text, std_text)[0]["epochs"] == 3
    assert parser.parse_all_logs(tmp_path)[0]["actual"]["epochs"] == 3
    assert parser.parse_all_logs(tmp_path)[0]["actual"]["energy (kWh)"] == round(15 / 3.6e6, 12)


def test_consumption_text_variants() -> None:
    text = (
        "CarbonTracker: \r\nActual consumption for 7 epochs:\r\n\tTime:\t1:00:00\r\n"
        "\tEnergy:\t1.2e-05 kWh\r\n\tCO2eq:\tnan g\r\n"
    )
    actual, pred = parser.get_consumption(text)
    assert pred is None
    assert actual["epochs"] == 7 and actual["duration (s)"] == 3600.0 and actual["energy (kWh)"] == 1.2e-05
    assert math.isnan(actual["co2eq (g)"]) and actual["equivalents"] is None
    assert parser.get_consumption("CarbonTracker: Finished monitoring.\n") == (None, None)


# ------------------------------------------------------------------ files and errors


def test_parse_logs_reads_the_file_it_is_given(tmp_path: Path) -> None:
    old = write_run(tmp_path, 1, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 10.0})])
    new = write_run(tmp_path, 2, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 20.0})])
    os.utime(old.std_log_path, (NEW_YEAR_UTC, NEW_YEAR_UTC))
    os.utime(new.std_log_path, (NEW_YEAR_UTC + 60, NEW_YEAR_UTC + 60))
    assert parser.parse_logs(tmp_path)["cpu"]["avg_power_usages (W)"].tolist() == [[20.0]]  # most recent
    for given in (str(old.std_log_path), old.std_log_path.name):
        assert parser.parse_logs(tmp_path, given)["cpu"]["avg_power_usages (W)"].tolist() == [[10.0]]
    # carbontracker ignores std_log_file unless output_log_file is given too
    assert ct_parser.parse_logs(str(tmp_path), str(old.std_log_path))["cpu"]["avg_power_usages (W)"].tolist() == [[20.0]]


def test_missing_and_empty_directories(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    for call in (parser.parse_all_logs, parser.aggregate_consumption, parser.parse_logs, parser.print_aggregate):
        with pytest.raises(LogFilesNotFoundError, match="does not exist") as caught:
            call(missing)
        assert isinstance(caught.value, OtelJoulesError) and isinstance(caught.value, FileNotFoundError)
    assert parser.parse_all_logs(tmp_path) == []
    for call in (parser.aggregate_consumption, parser.print_aggregate):
        with pytest.raises(LogFilesNotFoundError, match="no carbontracker logs found .* holds no carbontracker log"):
            call(tmp_path)
    with pytest.raises(LogFilesNotFoundError, match="no non-empty"):
        parser.parse_logs(tmp_path)
    with pytest.raises(LogFilesNotFoundError, match="does not exist"):
        parser.parse_logs(tmp_path, "missing_carbontracker.log")


def test_runs_are_paired_by_name_not_by_position(tmp_path: Path) -> None:
    good = write_run(tmp_path, 1, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 10.0})],
                     actual=(1, 1.0, 0.25, 100.0, None))
    lonely_std = write_run(tmp_path, 2, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 20.0})])
    lonely_out = write_run(tmp_path, 3, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 30.0})],
                           actual=(1, 1.0, 5.0, 2000.0, None))
    lonely_std.output_log_path.unlink()
    lonely_out.std_log_path.unlink()
    with pytest.warns(SkippedLogWarning, match="counterpart") as caught:
        entries = parser.parse_all_logs(tmp_path)
    assert [entry["standard_filename"] for entry in entries] == [str(good.std_log_path)]
    assert {str(w.message).split("'")[1] for w in caught} == {str(lonely_std.std_log_path), str(lonely_out.output_log_path)}
    with pytest.warns(SkippedLogWarning):
        assert parser.aggregate_consumption(tmp_path) == (0.25, 100.0, {})
    # carbontracker zips the sorted lists: run 2's standard log with run 3's output log
    theirs = ct_parser.parse_all_logs(str(tmp_path))
    assert (theirs[1]["standard_filename"], theirs[1]["output_filename"]) == (
        str(lonely_std.std_log_path), str(lonely_out.output_log_path)
    )


def test_empty_log_is_skipped_with_a_reason(tmp_path: Path) -> None:
    write_run(tmp_path, 1, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 10.0})], actual=(1, 1.0, 0.5, 1.0, None))
    empty = writer(tmp_path, 2)  # created, nothing written yet
    with pytest.warns(SkippedLogWarning, match="is empty") as caught:
        entries = parser.parse_all_logs(tmp_path)
    assert len(entries) == 1 and str(empty.std_log_path) in str(caught[0].message)
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_corrupt_standard_log(tmp_path: Path) -> None:
    good = write_run(tmp_path, 1, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 10.0})],
                     actual=(1, 1.0, 0.5, 1.0, None))
    bad = write_run(tmp_path, 2, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 10.0})],
                    actual=(1, 1.0, 7.0, 1.0, None))
    bad.write_info("Epoch 2:")
    bad.write_info("Duration: 0:00:01.00")
    bad.write_info("Average power usage (W) for cpu: 12,5W")
    with pytest.raises(LogFormatError, match=r"line 11: cannot read the power of 'cpu'") as caught:
        parser.parse_logs(tmp_path, str(bad.std_log_path))
    assert str(bad.std_log_path) in str(caught.value)
    with pytest.warns(SkippedLogWarning, match="cannot read the power"):
        entries = parser.parse_all_logs(tmp_path)
    assert [entry["standard_filename"] for entry in entries] == [str(good.std_log_path)]
    with pytest.warns(SkippedLogWarning):
        assert parser.aggregate_consumption(tmp_path)[0] == 0.5


def test_corrupt_output_block(tmp_path: Path) -> None:
    run = write_run(tmp_path, 1, components={"cpu": ["cpu:0"]}, epochs=[(1.0, {"cpu": 10.0})])
    run.write_output("\nActual consumption for 1 epoch(s):\n\tTime:\t0:00:01\n\tCO2eq:\t1.0 g")
    with pytest.raises(LogFormatError, match=r"'Actual consumption for 1 epoch\(s\):' block \(line \d+\) has no readable 'Energy"):
        parser.get_consumption(run.output_log_path.read_text())
    with pytest.warns(SkippedLogWarning, match="Energy"):
        with pytest.raises(LogFilesNotFoundError, match="none of its 2 log file.s. is a finished run"):
            parser.aggregate_consumption(tmp_path)


def test_not_a_carbontracker_log(tmp_path: Path) -> None:
    text_file = tmp_path / "notes_carbontracker.log"
    text_file.write_text("dear diary\n")
    with pytest.raises(LogFormatError, match="not a carbontracker standard log"):
        parser.parse_logs(tmp_path, str(text_file))
    binary = tmp_path / "blob_carbontracker.log"
    binary.write_bytes(b"\x00\x01\x02garbage")
    with pytest.raises(LogFormatError, match="binary data"):
        parser.parse_logs(tmp_path, str(binary))
    (tmp_path / "blob_carbontracker_output.log").write_text("x")
    (tmp_path / "notes_carbontracker_output.log").write_text("x")
    with pytest.warns(SkippedLogWarning) as caught:
        assert parser.parse_all_logs(tmp_path) == []
    assert sorted("binary data" in str(w.message) for w in caught) == [False, True]


def test_an_aggregate_over_garbage_is_no_logs_found_never_zero_kwh(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes_carbontracker.log").write_text("dear diary\n")
    (tmp_path / "notes_carbontracker_output.log").write_text("x")
    with pytest.warns(SkippedLogWarning, match="notes"):
        with pytest.raises(LogFilesNotFoundError, match="no carbontracker logs found") as caught:
            parser.print_aggregate(tmp_path)
    assert "none of its 2 log file(s)" in str(caught.value) and "SkippedLogWarning" in str(caught.value)
    assert "kWh" not in capsys.readouterr().out


def test_inconsistent_device_counts_are_a_clear_error(tmp_path: Path) -> None:
    run = write_run(tmp_path, 1, components={"gpu": ["a", "b"]},
                    epochs=[(1.0, {"gpu": [1.0, 2.0]}), (1.0, {"gpu": [1.0, 2.0, 3.0]})])
    with pytest.raises(LogFormatError, match=r"'gpu' has \[2, 3\] values"):
        parser.parse_logs(tmp_path, str(run.std_log_path))


def test_truncated_last_epoch_is_left_out(tmp_path: Path) -> None:
    run = write_run(tmp_path, 1, components={"cpu": ["cpu:0"]}, epochs=[(2.0, {"cpu": 10.0})])
    run.write_info("Epoch 2:")  # killed before the duration was written
    arrays = parser.parse_logs(tmp_path)["cpu"]
    assert arrays["epoch_durations (s)"].tolist() == [2.0]
    assert arrays["avg_energy_usages (J)"].tolist() == [[20.0]]


def test_standard_log_details(tmp_path: Path) -> None:
    run = write_run(tmp_path, 1, components={"gpu": ["A100"], "cpu": ["cpu:0"]},
                    epochs=[(1.0, {"gpu": 100.0, "cpu": 10.0})], actual=(1, 1.0, 0.1, 44.5, None), early_stop_of=4)
    log = parser.parse_standard_log(run.std_log_path.read_text())
    assert (log.software, log.version, log.pue) == ("otel-joules", "0.1.0", 1.58)
    assert log.devices == {"gpu": ["A100"], "cpu": ["cpu:0"]}
    assert log.average_intensity_g_per_kwh == 445.0
    assert log.early_stop is True
    assert [(e.epoch, e.duration_seconds, e.power_watts) for e in log.epochs] == [
        (1, 1.0, {"gpu": (100.0,), "cpu": (10.0,)})
    ]
    assert parser.get_early_stop(run.std_log_path.read_text()) is True
    assert parser.parse_duration("-0:00:01.50") == -1.5
    with pytest.raises(LogFormatError, match="h:mm:ss"):
        parser.parse_duration("1 minute")
