"""The package's front door (issue 10): what importing costs, where the public names live.

Each import-cost check runs a fresh interpreter, since this test process has imported
everything already.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import otel_joules

#: The folder holding the otel_joules under test (the worktree's src/, or site-packages).
PACKAGE_PARENT = str(Path(otel_joules.__file__).resolve().parent.parent)

#: Reports what a fresh interpreter loaded for the import given as argv[1].
_PROBE = textwrap.dedent(
    """
    import importlib, json, sys, time
    before = set(sys.modules)
    start = time.perf_counter()
    importlib.import_module(sys.argv[1])
    elapsed_s = time.perf_counter() - start
    print(json.dumps({"modules": sorted(set(sys.modules) - before), "elapsed_s": elapsed_s}))
    """
)

#: Packages that measure or need the OpenTelemetry SDK: a cheap import loads none of them.
HEAVY_PACKAGES = (
    "opentelemetry.sdk",
    "otel_joules.meter",
    "otel_joules.sensors",
    "otel_joules.tracing",
    "otel_joules.metrics",
    "otel_joules.attribution",
    "otel_joules.instrumentation",
    "otel_joules.exporters",
    "otel_joules.delivery",
)


def _fresh_import(module: str) -> tuple[list[str], float]:
    """(modules newly loaded, seconds) when a fresh interpreter imports ``module``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_PARENT, os.environ.get("PYTHONPATH")) if p))
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, module], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return report["modules"], report["elapsed_s"]


def _loaded_from(modules: list[str], package: str) -> list[str]:
    return [m for m in modules if m == package or m.startswith(package + ".")]


def test_the_probe_imports_the_package_under_test() -> None:
    modules, _ = _fresh_import("otel_joules")
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    where = subprocess.run(
        [sys.executable, "-c", "import otel_joules; print(otel_joules.__file__)"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout.strip()
    assert where == otel_joules.__file__
    assert "otel_joules" in modules


def test_importing_the_carbontracker_parser_stays_cheap(record_property: pytest.RecordProperty) -> None:
    """Its package docstring promises it: reading logs must not load the SDK, the meter or the sensors."""
    modules, elapsed_s = _fresh_import("otel_joules.carbontracker.parser")
    ours = _loaded_from(modules, "otel_joules")
    record_property("parser_import_s", round(elapsed_s, 4))
    record_property("parser_import_otel_joules_modules", len(ours))
    print(f"import otel_joules.carbontracker.parser: {elapsed_s * 1000:.0f} ms, {len(ours)} otel_joules modules: {ours}")
    for package in HEAVY_PACKAGES:
        assert not _loaded_from(modules, package), f"{package} loaded by the parser import"
    # The parser, the log format and the base modules; it was ~40 before, with the SDK and numpy.
    assert len(ours) <= 20, ours
    # numpy (~150 ms) only when carbontracker's per-component arrays are asked for.
    assert "numpy" not in modules


def test_import_otel_joules_loads_no_sdk_and_no_meter() -> None:
    modules, elapsed_s = _fresh_import("otel_joules")
    print(f"import otel_joules: {elapsed_s * 1000:.0f} ms")
    for package in HEAVY_PACKAGES:
        assert not _loaded_from(modules, package), f"{package} loaded by import otel_joules"


def test_root_names_resolve_on_first_use_to_their_modules_objects() -> None:
    from otel_joules.instrumentation import Instrumentation, instrument
    from otel_joules.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot, get_energy_meter
    from otel_joules.tracing import EnergySpanProcessor

    assert otel_joules.instrument is instrument
    assert otel_joules.Instrumentation is Instrumentation
    assert otel_joules.EnergyMeter is EnergyMeter
    assert otel_joules.EnergyMeasurement is EnergyMeasurement
    assert otel_joules.EnergySnapshot is EnergySnapshot
    assert otel_joules.get_energy_meter is get_energy_meter
    assert otel_joules.EnergySpanProcessor is EnergySpanProcessor
    assert set(otel_joules.__all__) <= set(dir(otel_joules))
    with pytest.raises(AttributeError, match="no_such_name"):
        otel_joules.no_such_name  # noqa: B018


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from otel_joules import *", namespace)  # noqa: S102 - the star import is what is tested
    assert set(otel_joules.__all__) <= set(namespace)


@pytest.mark.parametrize(
    "package",
    [
        "otel_joules",
        "otel_joules.attribution",
        "otel_joules.carbon",
        "otel_joules.delivery",
        "otel_joules.exporters",
        "otel_joules.instrumentation",
        "otel_joules.meter",
        "otel_joules.metrics",
        "otel_joules.report",
        "otel_joules.sensors",
        "otel_joules.tracing",
    ],
)
def test_every_public_name_of_a_package_exists(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing
    assert len(set(module.__all__)) == len(module.__all__)


def test_instrument_lives_in_the_composition_root_not_in_tracing() -> None:
    import otel_joules.tracing

    assert otel_joules.instrument.__module__ == "otel_joules.instrumentation.instrument"
    assert set(otel_joules.tracing.__all__) == {"EnergySpanProcessor", "end_span_with_measurement"}
    assert not hasattr(otel_joules.tracing, "instrument")


def test_instrumentation_needs_no_instrument_extra_until_the_instrumentor_is_used(tmp_path: Path) -> None:
    """Without opentelemetry-instrumentation, instrument() and the context work; only EnergyInstrumentor fails."""
    script = textwrap.dedent(
        """
        import sys

        class _NoInstrumentationExtra:
            # As if opentelemetry-instrumentation were not installed.
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry.instrumentation" or name.startswith("opentelemetry.instrumentation."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, _NoInstrumentationExtra())

        from opentelemetry.sdk.trace import TracerProvider
        from otel_joules.instrumentation import attach_environment_context, instrument

        handle = instrument(TracerProvider(), metrics_enabled=False, sysfs_root=sys.argv[1], gpus=[])
        assert handle.active
        handle.uninstrument()
        assert attach_environment_context({}) is None
        assert not any(m.startswith("opentelemetry.instrumentation") for m in sys.modules)
        try:
            from otel_joules.instrumentation import EnergyInstrumentor
        except ModuleNotFoundError as exc:
            print("instrumentor:", exc.name)
        """
    )
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    for name in ("OTEL_JOULES_COUNTRY", "OTEL_JOULES_CARBON_PROVIDERS", "OTEL_JOULES_ELECTRICITYMAPS_API_KEY", "OTEL_SDK_DISABLED"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "no-powercap")],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "instrumentor: opentelemetry.instrumentation" in result.stdout


def test_the_instrumentor_is_also_reachable_from_the_package() -> None:
    pytest.importorskip("opentelemetry.instrumentation")
    from otel_joules.instrumentation import EnergyInstrumentor

    assert EnergyInstrumentor is importlib.import_module("otel_joules.instrumentation.zero_code").EnergyInstrumentor


def _private_classes(path: Path) -> list[str]:
    return [node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef) and node.name.startswith("_")]


def test_no_public_module_defines_a_private_class() -> None:
    """A public module (no ``_`` in any part of its path) holds public names; its internals live in ``_`` modules."""
    root = Path(otel_joules.__file__).resolve().parent
    public = [
        path
        for path in sorted(root.rglob("*.py"))
        if not any(part.startswith("_") for part in path.relative_to(root).with_suffix("").parts if part != "__init__")
    ]
    assert len(public) > 50  # the walk found the package's modules
    found = {str(path.relative_to(root)): names for path in public if (names := _private_classes(path))}
    assert not found, f"move these internals to a _-prefixed module, or name and document them as public: {found}"


def test_only_package_inits_say_what_is_public() -> None:
    """``__all__`` is a package's front door; a plain module's public names are those without a leading underscore."""
    root = Path(otel_joules.__file__).resolve().parent
    with_all = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "__init__.py" and any(line.startswith("__all__") for line in path.read_text().splitlines())
    ]
    assert not with_all


#: Lists, for every public module of the package but the pyJoules look-alike, each parameter of a
#: public function, class or method that takes a meter or an attributor, or is named for attribution.
_SIGNATURES_PROBE = textwrap.dedent(
    """
    import importlib, inspect, json, pkgutil, re
    import otel_joules

    found = []
    for info in pkgutil.walk_packages(otel_joules.__path__, "otel_joules."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]) or info.name.startswith("otel_joules.pyjoules"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError:  # an extra that is not installed: its module has nothing to check here
            continue
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            callables = [(name, obj)]
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    value = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    if not member.startswith("_") and inspect.isfunction(value):
                        callables.append((name + "." + member, value))
            for label, function in callables:
                try:
                    parameters = inspect.signature(function).parameters.values()
                except (TypeError, ValueError):
                    continue
                for p in parameters:
                    annotation = str(p.annotation)
                    if re.search(r"\\bEnergyMeter\\b|\\bAttributor\\b", annotation) or "attribut" in p.name:
                        found.append({
                            "where": module.__name__ + ":" + label, "name": p.name, "annotation": annotation,
                            "default": None if p.default is p.empty else repr(p.default),
                        })
    print(json.dumps(found))
    """
)


def _meter_and_attribution_parameters() -> list[dict[str, str | None]]:
    """Every public parameter that takes a meter or an attributor (see :data:`_SIGNATURES_PROBE`), from a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_PARENT, os.environ.get("PYTHONPATH")) if p))
    result = subprocess.run(
        [sys.executable, "-c", _SIGNATURES_PROBE], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_one_name_for_the_meter_and_one_way_to_turn_attribution_off() -> None:
    """Issue 21: a meter is always ``meter``; whatever can turn attribution off takes ``attribution: bool | Attributor = True``.

    Operands (a required Attributor that a function works on) are not switches; the pyJoules
    look-alike keeps pyJoules' names.
    """
    parameters = _meter_and_attribution_parameters()
    wheres = {p["where"] for p in parameters}
    # The scan sees the callables the issue names, so an empty or broken scan fails here.
    assert {
        "otel_joules.instrumentation.instrument:instrument",
        "otel_joules.instrumentation.instrument:Instrumentation",
        "otel_joules.metrics.instruments:EnergyMetrics",
        "otel_joules.tracing.processor:EnergySpanProcessor",
        "otel_joules.carbontracker.tracker:CarbonTracker",
    } <= wheres
    meters = [p for p in parameters if re.search(r"\bEnergyMeter\b", p["annotation"])]
    assert [p for p in meters if p["name"] != "meter"] == []
    switches = [
        p for p in parameters
        if p["default"] is not None and ("Attributor" in p["annotation"] or "bool" in p["annotation"])
        and p["name"] != "attribution_policy"
    ]
    assert {p["where"] for p in switches} >= {
        "otel_joules.instrumentation.instrument:instrument",
        "otel_joules.metrics.instruments:EnergyMetrics",
        "otel_joules.tracing.processor:EnergySpanProcessor",
    }
    spelled_otherwise = [
        p for p in switches if (p["name"], p["annotation"], p["default"]) != ("attribution", "bool | Attributor", "True")
    ]
    assert spelled_otherwise == []
