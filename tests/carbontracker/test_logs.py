"""The carbontracker log writer, checked line by line against carbontracker 2.4.7's own writers."""

from __future__ import annotations

import os
import re
import time
import types
from pathlib import Path

import pytest
from carbontracker import loggerutil
from carbontracker import parser as ct_parser
from carbontracker.emissions.conversion import co2eq as ct_co2eq
from carbontracker.tracker import CarbonIntensityThread

from otel_joules.carbontracker.logs import (
    CARBONTRACKER_PUE,
    CarbonTrackerLogWriter,
    ConsumptionKind,
    InvalidLogValueError,
    LogWriteError,
    consumption_heading,
    format_consumption,
    format_duration,
    format_number,
    format_power,
)
from otel_joules.errors import OtelJoulesError

# 2026-01-01T00:00:00Z

from tests.helpers.carbontracker_oracle import carbontracker_logger, log_components, log_epoch, output_energy
NEW_YEAR_UTC = 1767225600.0
PREFIX_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} - ", re.MULTILINE)


def fixed_clock(value: float = NEW_YEAR_UTC):
    return lambda: value


def without_prefixes(text: str) -> str:
    return PREFIX_RE.sub("", text)


def only_file(directory: Path, suffix: str) -> Path:
    (path,) = [p for p in directory.iterdir() if p.name.endswith(suffix)]
    return path


# ------------------------------------------------------------------------ file names


def test_file_names_are_carbontrackers(tmp_path: Path) -> None:
    ours_dir, theirs_dir = tmp_path / "ours", tmp_path / "theirs"
    writer = CarbonTrackerLogWriter(ours_dir, "exp", pid=os.getpid(), run_id=77, clock=fixed_clock())
    with carbontracker_logger(theirs_dir, prefix="exp", logger_id="77") as logger:
        logger.err_warn("something")  # the error log only appears when written to

    assert writer.stem == f"exp_{os.getpid()}.77_2026-01-01T000000Z"
    assert writer.std_log_path == ours_dir / f"{writer.stem}_carbontracker.log"
    assert writer.output_log_path == ours_dir / f"{writer.stem}_carbontracker_output.log"
    assert writer.err_log_path == ours_dir / f"{writer.stem}_carbontracker_err.log"
    assert writer.std_log_path.exists() and writer.output_log_path.exists()
    assert not writer.err_log_path.exists()
    writer.write_error("something")
    assert writer.err_log_path.exists()

    # Same names as carbontracker's, up to the date it takes from its own clock.
    date_re = re.compile(r"_\d{4}-\d{2}-\d{2}T\d{6}Z_")
    ours = sorted(date_re.sub("_DATE_", p.name) for p in ours_dir.iterdir())
    theirs = sorted(date_re.sub("_DATE_", p.name) for p in theirs_dir.iterdir())
    assert ours == theirs == sorted(
        f"exp_{os.getpid()}.77_DATE_{suffix}"
        for suffix in ("carbontracker.log", "carbontracker_output.log", "carbontracker_err.log")
    )


def test_no_prefix_and_random_run_ids_do_not_collide(tmp_path: Path) -> None:
    first = CarbonTrackerLogWriter(tmp_path, pid=12, clock=fixed_clock())
    second = CarbonTrackerLogWriter(tmp_path, pid=12, clock=fixed_clock())
    assert re.fullmatch(r"12\.\d{1,6}_2026-01-01T000000Z", first.stem)
    assert 1 <= int(first.stem.split(".")[1].split("_")[0]) <= 999_999
    assert first.stem != second.stem
    assert len(list(tmp_path.iterdir())) == 4


def test_same_run_id_twice_is_refused_not_appended(tmp_path: Path) -> None:
    CarbonTrackerLogWriter(tmp_path, pid=1, run_id=5, clock=fixed_clock()).write_info("first run")
    with pytest.raises(LogWriteError, match="already exist"):
        CarbonTrackerLogWriter(tmp_path, pid=1, run_id=5, clock=fixed_clock())
    (std,) = tmp_path.glob("*_carbontracker.log")
    assert without_prefixes(std.read_text()) == "first run\n"


def test_prefix_with_a_path_separator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidLogValueError, match="log_dir"):
        CarbonTrackerLogWriter(tmp_path, "sub/exp")


def test_unwritable_log_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(LogWriteError, match="cannot create the log directory") as caught:
        CarbonTrackerLogWriter(blocker / "logs")
    assert isinstance(caught.value, OtelJoulesError) and isinstance(caught.value, OSError)


def test_line_prefix_is_local_time_and_file_name_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # POSIX TZ string: a zone one hour east of UTC, no tz database needed.
    monkeypatch.setenv("TZ", "XYZ-1")
    time.tzset()
    try:
        writer = CarbonTrackerLogWriter(tmp_path, pid=3, run_id=4, clock=fixed_clock(NEW_YEAR_UTC + 5.75))
        writer.write_info("hello")
        writer.write_error("bad", level="critical", thread_name="CarbonTrackerThread")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert writer.stem == "3.4_2026-01-01T000005Z"
    assert writer.std_log_path.read_text() == "2026-01-01 01:00:05 - hello\n"
    assert writer.err_log_path.read_text() == "2026-01-01 01:00:05,750 - CarbonTrackerThread - CRITICAL - bad\n"


# ------------------------------------------------------------------------- messages


def test_header_is_line_for_line_carbontrackers(tmp_path: Path) -> None:
    components = {"gpu": ["Tesla T4", "Tesla T4"], "cpu": ["cpu:0", "dram:0"]}
    writer = CarbonTrackerLogWriter(tmp_path / "ours", clock=fixed_clock())
    console = writer.write_header(components, software="carbontracker", version="2.4.7")
    with carbontracker_logger(tmp_path / "theirs") as logger:
        log_components(logger, components)

    theirs_std = only_file(tmp_path / "theirs", "_carbontracker.log").read_text()
    theirs_out = only_file(tmp_path / "theirs", "_carbontracker_output.log").read_text()
    assert without_prefixes(writer.std_log_path.read_text()) == without_prefixes(theirs_std)
    assert without_prefixes(writer.output_log_path.read_text()) == without_prefixes(theirs_out)
    assert console == (
        "CarbonTracker: The following components were found: "
        "GPU with device(s) Tesla T4, Tesla T4. CPU with device(s) cpu:0, dram:0."
    )
    assert f"PUE coefficient of {CARBONTRACKER_PUE} (" in writer.std_log_path.read_text()


def test_header_defaults_name_otel_joules_and_take_any_pue(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=fixed_clock())
    writer.write_header({"cpu": ["cpu:0"]}, pue=1.0, pue_source=None, version="9.9")
    lines = without_prefixes(writer.std_log_path.read_text()).splitlines()
    assert lines[0] == "otel-joules version 9.9"
    assert lines[1] == "Only predicted and actual consumptions are multiplied by a PUE coefficient of 1.0."


def test_device_names_keep_dots_and_lose_commas_and_line_breaks(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=fixed_clock())
    console = writer.write_header({"gpu": ["NVIDIA A100.1", "Acme, Inc.\nGPU"]})
    assert console.endswith("GPU with device(s) NVIDIA A100.1, Acme; Inc. GPU.")


def test_epoch_block_is_line_for_line_carbontrackers(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path / "ours", clock=fixed_clock())
    cases = [
        (1, 1.25, {"gpu": 400.0, "cpu": 75.5}, {"gpu": [400.0, 400.0], "cpu": [75.0, 76.0]}),
        (2, 3725.999, {"gpu": 123.456, "cpu": None}, {"gpu": [123.456], "cpu": []}),
        (3, 59.996, {"gpu": 0.0, "cpu": 12.0}, {"gpu": [0.0], "cpu": [12.0]}),
    ]
    with carbontracker_logger(tmp_path / "theirs") as logger:
        for epoch, seconds, ours, theirs in cases:
            writer.write_epoch(epoch, duration_seconds=seconds, power_watts=ours)
            log_epoch(logger, epoch, seconds, theirs)
    theirs_lines = without_prefixes(only_file(tmp_path / "theirs", "_carbontracker.log").read_text()).splitlines()
    ours_lines = without_prefixes(writer.std_log_path.read_text()).splitlines()
    assert ours_lines == theirs_lines[2:]  # after carbontracker's version and PUE lines
    assert ours_lines[:4] == [
        "Epoch 1:",
        "Duration: 0:00:01.25",
        "Average power usage (W) for gpu: 400.0",
        "Average power usage (W) for cpu: 75.5",
    ]
    assert ours_lines[5] == "Duration: 1:02:06.00"
    assert ours_lines[7] == "Average power usage (W) for cpu: None"
    assert ours_lines[9] == "Duration: 0:01:00.00"


def test_tiny_power_is_written_so_carbontrackers_parser_reads_it(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path / "ours", clock=fixed_clock())
    writer.write_epoch(1, duration_seconds=2.0, power_watts={"cpu": 1.2e-05})
    with carbontracker_logger(tmp_path / "theirs") as logger:
        log_epoch(logger, 1, 2.0, {"cpu": [1.2e-05]})
    theirs_text = only_file(tmp_path / "theirs", "_carbontracker.log").read_text()
    ours_text = writer.std_log_path.read_text()

    assert "for cpu: 1.2e-05" in theirs_text  # carbontracker writes exponent notation...
    assert ct_parser.get_avg_power_usages(theirs_text) == {"cpu": [[1.2]]}  # ...and reads it back wrong
    assert "for cpu: 0.000012\n" in ours_text
    assert ct_parser.get_avg_power_usages(ours_text) == {"cpu": [[1.2e-05]]}


def test_per_device_power_list_layout(tmp_path: Path) -> None:
    assert format_power([300, 100.5]) == "[300.0 100.5]"
    assert format_power([1.2e-05, None, float("nan")]) == "[0.000012 nan nan]"
    assert format_power(None) == "None"
    assert format_power(float("nan")) == "None"
    assert format_power(42) == "42.0"


@pytest.mark.parametrize(
    "value, text",
    [(1.2e-05, "0.000012"), (150, "150.0"), (0.1, "0.1"), (1e20, "100000000000000000000.0"), (-2.5e-7, "-0.00000025")],
)
def test_format_number_is_plain_and_exact(value: float, text: str) -> None:
    assert format_number(value) == text
    assert float(text) == value


def test_format_number_round_trips_without_exponent() -> None:
    values = [5e-324, 1.7976931348623157e308, 1 / 3, 2 / 3 * 1e-9, 123456.789e10, 0.0]
    for value in values:
        text = format_number(value)
        assert "e" not in text.lower()
        assert float(text) == value


@pytest.mark.parametrize("centiseconds", [False, True])
def test_format_duration_matches_carbontracker(centiseconds: bool) -> None:
    values = [0, 0.004, 0.005, 0.125, 0.5, 1.5, 2.5, 59.4, 59.5, 59.994, 59.995, 59.996, 60, 61.25,
              3599.49, 3599.5, 3599.999, 3600, 3725.999, 86400 * 2 + 0.125, 360000.01, 12345.678]
    for seconds in values:
        expected = loggerutil.convert_to_timestring(seconds, centiseconds)
        assert format_duration(seconds, centiseconds=centiseconds) == expected, seconds


def test_format_duration_values() -> None:
    assert format_duration(3725.999, centiseconds=True) == "1:02:06.00"
    assert format_duration(90061) == "25:01:01"
    with pytest.raises(InvalidLogValueError, match="negative"):
        format_duration(-1)


# --------------------------------------------------------------------- consumption


def _theirs_console(capsys: pytest.CaptureFixture[str], description: str, **kwargs: object) -> str:
    capsys.readouterr()
    with carbontracker_logger(None, verbose=1) as logger:
        output_energy(logger, description, **kwargs)
    return capsys.readouterr().out


@pytest.mark.parametrize("precision", [12, 6, 3, 0])
def test_consumption_console_text_is_carbontrackers(capsys: pytest.CaptureFixture[str], precision: int) -> None:
    co2eq_grams = 0.257832488281
    conversions = ct_co2eq.convert(co2eq_grams)  # carbontracker's own km-by-car figure
    assert [unit for _, unit in conversions] == ["km travelled by car"]
    theirs = _theirs_console(
        capsys,
        "Predicted consumption for 4 epoch(s):",
        time_seconds=5.4,
        energy_kwh=0.00057939885,
        co2eq_grams=co2eq_grams,
        conversions=conversions,
        decimal_precision=precision,
    )
    ours = format_consumption(
        "predicted",
        epochs=4,
        duration_seconds=5.4,
        energy_kwh=0.00057939885,
        co2eq_grams=co2eq_grams,
        equivalents={unit: amount for amount, unit in conversions},
        decimal_precision=precision,
    )
    assert ours + "\n" == theirs


def test_consumption_block_exact_text() -> None:
    text = format_consumption(
        ConsumptionKind.ACTUAL,
        epochs=2,
        duration_seconds=62.75,
        energy_joules=43.2,  # 43.2 J = 0.000012 kWh
        co2eq_grams=0.00534,
        equivalents={"km travelled by car": 0.00534 / 106.8},
    )
    assert text == (
        "CarbonTracker: \n"
        "Actual consumption for 2 epoch(s):\n"
        "\tTime:\t0:01:03\n"
        "\tEnergy:\t0.000012000000 kWh\n"
        "\tCO2eq:\t0.005340000000 g\n"
        "\tThis is equivalent to:\n"
        "\t0.000050000000 km travelled by car"
    )


def test_actual_without_prediction_and_without_equivalents(capsys: pytest.CaptureFixture[str]) -> None:
    theirs = _theirs_console(
        capsys, "Actual consumption:", time_seconds=10, energy_kwh=1.0, co2eq_grams=445.0, conversions=None,
        decimal_precision=2,
    )
    ours = format_consumption(
        "actual", epochs=None, duration_seconds=10, energy_joules=3_600_000, co2eq_grams=445.0, decimal_precision=2
    )
    assert ours + "\n" == theirs
    assert ours == "CarbonTracker: \nActual consumption:\n\tTime:\t0:00:10\n\tEnergy:\t1.00 kWh\n\tCO2eq:\t445.00 g"
    assert format_consumption("actual", epochs=1, duration_seconds=1, energy_kwh=1, co2eq_grams=1, equivalents={}) == (
        format_consumption("actual", epochs=1, duration_seconds=1, energy_kwh=1, co2eq_grams=1)
    )


def test_consumption_headings() -> None:
    assert consumption_heading("predicted", 10) == "Predicted consumption for 10 epoch(s):"
    assert consumption_heading("actual", 0) == "Actual consumption for 0 epoch(s):"
    assert consumption_heading("actual", None) == "Actual consumption:"
    with pytest.raises(InvalidLogValueError, match="epochs=N"):
        consumption_heading("predicted", None)
    with pytest.raises(InvalidLogValueError, match="'actual' or 'predicted'"):
        consumption_heading("guessed", 1)


def test_output_log_is_line_for_line_carbontrackers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = CarbonTrackerLogWriter(tmp_path / "ours", clock=fixed_clock())
    blocks = [
        ("Predicted consumption for 4 epoch(s):", "predicted", 4, 5.0, 0.00057939885, 0.257832488281),
        ("Actual consumption for 2 epoch(s):", "actual", 2, 2.6, 1.2e-05, 5.34e-03),
    ]
    with carbontracker_logger(tmp_path / "theirs") as logger:
        for description, kind, epochs, seconds, kwh, grams in blocks:
            conversions = ct_co2eq.convert(grams)
            output_energy(logger, description, time_seconds=seconds, energy_kwh=kwh, co2eq_grams=grams,
                          conversions=conversions, decimal_precision=12)
            console = writer.write_consumption(kind, epochs=epochs, duration_seconds=seconds, energy_kwh=kwh,
                                               co2eq_grams=grams, equivalents={u: a for a, u in conversions})
            assert console.startswith("CarbonTracker: \n" + description)
    theirs = only_file(tmp_path / "theirs", "_carbontracker_output.log").read_text()
    assert without_prefixes(writer.output_log_path.read_text()) == without_prefixes(theirs)
    # and carbontracker's parser reads our values back
    actual, pred = ct_parser.get_consumption(writer.output_log_path.read_text())
    assert pred["epochs"] == 4 and pred["duration (s)"] == 5.0
    assert pred["energy (kWh)"] == 0.000579398850 and pred["co2eq (g)"] == 0.257832488281
    assert actual["energy (kWh)"] == 1.2e-05 and actual["co2eq (g)"] == 0.00534
    assert actual["duration (s)"] == 3.0  # whole seconds, rounded as carbontracker rounds
    assert actual["equivalents"] == {"km travelled by car": round(0.00534 / 106.8, 12)}


def test_average_intensity_lines_are_carbontrackers(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path / "ours", clock=fixed_clock())
    intensities = [445.0, 143.333, 210.9]
    console = writer.write_average_intensity(
        sum(intensities) / 3, intensities_g_per_kwh=intensities, update_interval_seconds=900, location="Unknown"
    )
    with carbontracker_logger(tmp_path / "theirs") as logger:
        this = types.SimpleNamespace(
            logger=logger,
            update_interval=900,
            carbon_intensities_fetches=[types.SimpleNamespace(carbon_intensity=i, address="Unknown") for i in intensities],
        )
        average = CarbonIntensityThread.average_carbon_intensity(this)
    assert average == pytest.approx(sum(intensities) / 3)
    theirs_std = without_prefixes(only_file(tmp_path / "theirs", "_carbontracker.log").read_text()).splitlines()[2:]
    theirs_out = without_prefixes(only_file(tmp_path / "theirs", "_carbontracker_output.log").read_text())
    assert without_prefixes(writer.std_log_path.read_text()).splitlines() == theirs_std
    assert without_prefixes(writer.output_log_path.read_text()) == theirs_out
    assert console == "CarbonTracker: Average carbon intensity during training was 266.41 gCO2eq/kWh. "


def test_intensity_source_is_said_after_carbontrackers_text(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=fixed_clock())
    writer.write_intensity_fetched(82.0, location="Copenhagen, DK")
    writer.write_average_intensity(143.3, source="Source: offline yearly average for DK (OWID 2024).")
    writer.write_predicted_intensity(107.49, duration_seconds=10746, location="Copenhagen, DK")
    lines = without_prefixes(writer.std_log_path.read_text()).splitlines()
    assert lines == [
        "Carbon intensity fetched: 82.00 gCO2/kWh at Copenhagen, DK",
        "Average carbon intensity during training was 143.30 gCO2eq/kWh. Source: offline yearly average for DK (OWID 2024).",
        "Carbon intensity for the next 2:59:06 is predicted to be 107.49 gCO2/kWh at detected location: Copenhagen, DK.",
    ]


def test_early_stop_and_finish_lines(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=fixed_clock())
    writer.write_early_stop(5)
    assert writer.write_finished() == "CarbonTracker: Finished monitoring."
    std = writer.std_log_path.read_text()
    assert without_prefixes(std).splitlines() == [
        "Training was interrupted before all 5 epochs were monitored.",
        "Monitoring thread ended.",
    ]
    assert ct_parser.get_early_stop(std) is True
    assert without_prefixes(writer.output_log_path.read_text()) == "CarbonTracker: Finished monitoring.\n"


# --------------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"energy_kwh": 1.0, "energy_joules": 3.6e6}, "exactly once"),
        ({}, "exactly once"),
        ({"energy_kwh": float("nan")}, "finite"),
        ({"energy_kwh": -1.0}, "negative"),
        ({"energy_kwh": "1.0"}, "must be a number"),
        ({"energy_kwh": 1.0, "decimal_precision": -1}, "decimal_precision"),
        ({"energy_kwh": 1.0, "decimal_precision": 2.5}, "decimal_precision"),
        ({"energy_kwh": 1.0, "equivalents": {"km": float("inf")}}, "finite"),
        ({"energy_kwh": 1.0, "equivalents": {" ": 1.0}}, "unit must not be empty"),
    ],
)
def test_bad_consumption_values_are_clear_errors(kwargs: dict, match: str) -> None:
    arguments = {"epochs": 1, "duration_seconds": 1.0, "co2eq_grams": 1.0, **kwargs}
    with pytest.raises(InvalidLogValueError, match=match) as caught:
        format_consumption("actual", **arguments)
    assert isinstance(caught.value, OtelJoulesError) and isinstance(caught.value, ValueError)


def test_bad_epoch_writes_nothing(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=fixed_clock())
    with pytest.raises(InvalidLogValueError, match="power_watts"):
        writer.write_epoch(1, duration_seconds=1.0, power_watts={"gpu": 10.0, "cpu": -5.0})
    with pytest.raises(InvalidLogValueError, match="one word"):
        writer.write_epoch(1, duration_seconds=1.0, power_watts={"my gpu": 10.0})
    with pytest.raises(InvalidLogValueError, match="empty"):
        writer.write_epoch(1, duration_seconds=1.0, power_watts={"gpu": []})
    with pytest.raises(InvalidLogValueError, match="epoch"):
        writer.write_epoch(True, duration_seconds=1.0, power_watts={"gpu": 1.0})
    assert writer.std_log_path.read_text() == ""


def test_bad_components_are_clear_errors(tmp_path: Path) -> None:
    writer = CarbonTrackerLogWriter(tmp_path, clock=fixed_clock())
    with pytest.raises(InvalidLogValueError, match="at least one component"):
        writer.write_header({})
    with pytest.raises(InvalidLogValueError, match="list of names"):
        writer.write_header({"gpu": "A100"})
    with pytest.raises(InvalidLogValueError, match="pue must be positive"):
        writer.write_header({"gpu": ["A100"]}, pue=0)
    assert writer.std_log_path.read_text() == ""


# Planted links (issue 24, item 6) ---------------------------------------------------------


def test_log_replaced_by_a_link_is_refused_and_its_target_unchanged(tmp_path: Path) -> None:
    from otel_joules.carbontracker.logs import CarbonTrackerLogWriter, LogWriteError

    target = tmp_path / "bashrc"
    target.write_bytes(b"# never touched\n")
    writer = CarbonTrackerLogWriter(tmp_path / "logs", clock=lambda: 1_700_000_000.0, run_id=7)
    for path in (writer.std_log_path, writer.output_log_path):
        path.unlink()
        path.symlink_to(target)
    writer.err_log_path.symlink_to(target)  # created on the first error: planted ahead of it
    for write in (lambda: writer.write_info("hello"), lambda: writer.write_output("hello"),
                  lambda: writer.write_error("boom")):
        with pytest.raises(LogWriteError) as caught:
            write()
        assert "is a symbolic link" in str(caught.value) and "\n" not in str(caught.value)
    assert target.read_bytes() == b"# never touched\n"


def test_new_logs_are_never_world_writable(tmp_path: Path) -> None:
    import os
    import stat

    from otel_joules.carbontracker.logs import CarbonTrackerLogWriter

    old = os.umask(0)
    try:
        writer = CarbonTrackerLogWriter(tmp_path, clock=lambda: 1_700_000_000.0, run_id=7)
        writer.write_error("boom")
    finally:
        os.umask(old)
    for path in (writer.std_log_path, writer.output_log_path, writer.err_log_path):
        assert stat.S_IMODE(path.stat().st_mode) & 0o002 == 0, path
