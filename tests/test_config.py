"""otel_joules.config: the one home of every OTEL_JOULES_* variable, its documented table (docs/configuration.md), bad values."""

from __future__ import annotations

import ast
import logging
import re
import subprocess
from pathlib import Path

import pytest

from otel_joules import config
from otel_joules.config import ENVIRONMENT_VARIABLES, Settings
from otel_joules.errors import ConfigurationError

from tests.helpers.docs import documentation_text
from tests.helpers.processes import REPO

SOURCE = REPO / "src" / "otel_joules"

#: The values every variable is fuzzed with (issue 13).
HOSTILE_VALUES = ("garbage", "-1", "nan", "inf", "1e400", "")


def _readme_settings_rows() -> dict[str, str]:
    """Variable -> default column of the documentation's settings table (the one headed 'setting | environment variable')."""
    text = documentation_text()
    table = text[text.index("| setting | environment variable | default |") :]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        _, variable_cell, default_cell = [cell.strip() for cell in line.strip("|").split("|")]
        for name in re.findall(r"OTEL_JOULES_\w+", variable_cell):
            rows[name] = default_cell
    return rows


def test_readme_settings_table_is_the_config_module() -> None:
    rows = _readme_settings_rows()
    assert list(rows) == list(ENVIRONMENT_VARIABLES)
    # Numeric defaults as the README states them.
    assert rows[config.OTEL_JOULES_CPU_TDP_WATTS].startswith(f"{config.DEFAULT_CPU_TDP_WATTS:g} W")
    assert rows[config.OTEL_JOULES_MEMORY_WATTS_PER_GB].startswith(f"{config.DEFAULT_MEMORY_WATTS_PER_GB:g} W/GB")
    assert rows[config.OTEL_JOULES_MAX_POWER_WATTS].startswith(f"{config.DEFAULT_MAX_POWER_WATTS:g} W")
    assert rows[config.OTEL_JOULES_MAX_SNAPSHOT_AGE_S].startswith(f"{config.DEFAULT_MAX_SNAPSHOT_AGE_S:g} s")
    assert rows[config.OTEL_JOULES_SYSFS_ROOT] == f"`{config.DEFAULT_SYSFS_ROOT}`"
    assert rows[config.OTEL_JOULES_PROCFS_ROOT] == f"`{config.DEFAULT_PROCFS_ROOT}`"
    # And the module docstring's table names them all too.
    assert all(f"``{name}``" in (config.__doc__ or "") for name in ENVIRONMENT_VARIABLES)


def test_every_variable_the_package_mentions_is_a_config_constant() -> None:
    # Only config.py spells a variable's value in code; other modules import its constant.
    names: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        names.update(re.findall(r"OTEL_JOULES_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
    assert names <= set(ENVIRONMENT_VARIABLES), names - set(ENVIRONMENT_VARIABLES)
    grep = subprocess.run(
        ["grep", "-rnE", r"(environ|getenv|env\.get)\(\s*[\"']OTEL_JOULES_", str(SOURCE)], capture_output=True, text=True
    )
    assert grep.stdout == "", "read an OTEL_JOULES_* variable outside config.py:\n" + grep.stdout


#: Names an environment mapping goes by in the package.
_ENVIRONMENT_RECEIVERS = ("env", "environ", "os.environ")
_VARIABLE_LIKE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$")


def _spelled_out_reads(path: Path, root: Path = SOURCE) -> list[str]:
    """Environment reads in ``path`` whose variable is a string or f-string in the call, not a constant.

    A read is ``get``/``pop``/``setdefault`` or a subscript on an environment mapping, or
    ``os.getenv``; a ``get`` of a variable-like upper-case string on any other mapping counts too.
    """
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            receiver, method, name = ast.unparse(node.func.value), node.func.attr, node.args[0]
            environment = (method in ("get", "pop", "setdefault") and receiver in _ENVIRONMENT_RECEIVERS) or (
                method == "getenv" and receiver == "os"
            )
            variable_like = method == "get" and isinstance(name, ast.Constant) and _VARIABLE_LIKE.match(str(name.value))
        elif isinstance(node, ast.Subscript):
            name = node.slice
            environment, variable_like = ast.unparse(node.value) in _ENVIRONMENT_RECEIVERS, False
        else:
            continue
        spelled = isinstance(name, ast.JoinedStr) or (isinstance(name, ast.Constant) and isinstance(name.value, str))
        if (environment and spelled) or variable_like:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_environment_read_names_its_variable_by_a_constant() -> None:
    # Ours in config.py, the SDK's from its environment_variables modules, other tools' (CUDA, W3C,
    # proxies) in config.py: a name spelled at a read could drift from the documented one.
    found = [read for path in sorted(SOURCE.rglob("*.py")) for read in _spelled_out_reads(path)]
    assert found == []


def test_the_read_check_catches_each_way_of_spelling_a_variable(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "import os\n"
        "a = env.get('OTEL_JOULES_X')\n"
        "b = os.environ['CUDA_VISIBLE_DEVICES']\n"
        "c = os.getenv('no_proxy')\n"
        "d = env.get(f'OTEL_{signal}_EXPORTER')\n"
        "e = mapping.get('OTEL_TRACES_EXPORTER')\n"
        "f = env.get(CONSTANT)\n"
    )
    assert [read.split(":")[1] for read in _spelled_out_reads(module, tmp_path)] == ["2", "3", "4", "5", "6"]


@pytest.mark.parametrize("value", HOSTILE_VALUES)
def test_hostile_values_of_every_variable_fall_back_to_defaults(value: str, caplog) -> None:
    env = {name: value for name in ENVIRONMENT_VARIABLES}
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        settings = Settings.from_env(env)
        again = Settings.from_env(env)
    assert settings == again
    default = Settings()
    for field in ("cpu_tdp_watts", "memory_watts_per_gb", "max_power_watts", "max_snapshot_age_s",
                  "prometheus_wait_s", "dk_price_area", "full_command_line", "carbon_providers"):
        assert getattr(settings, field) == getattr(default, field), field
    if value == "":
        assert settings == default
    messages = [r.getMessage() for r in caplog.records]
    # Each bad variable is said at most once (a repeat is silent) and by its name.
    assert len(messages) == len(set(messages))
    for message in messages:
        assert re.match(r"otel-joules: OTEL_JOULES_\w+=", message), message


@pytest.mark.parametrize(
    ("raw", "problem"),
    [("abc", "is not a number"), ("-5", "must be > 0"), ("0", "must be > 0"), ("nan", "is not a finite number"),
     ("inf", "is not a finite number"), ("-inf", "is not a finite number"), ("1e308", "is beyond the largest sensible value (10000000)")],
)
def test_a_bad_number_is_named_with_its_problem_and_the_default(raw: str, problem: str, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        settings = Settings.from_env({config.OTEL_JOULES_MAX_POWER_WATTS: raw})
    assert settings.max_power_watts == 1000.0
    assert [r.getMessage() for r in caplog.records] == [
        f"otel-joules: OTEL_JOULES_MAX_POWER_WATTS={raw!r} {problem}; using the default 1000 instead"
    ]


def test_tdp_inf_keeps_the_estimate(tmp_path: Path) -> None:
    # It used to remove the estimate domain silently.
    from otel_joules import EnergyMeter

    env = {
        config.OTEL_JOULES_CPU_TDP_WATTS: "inf",
        config.OTEL_JOULES_SYSFS_ROOT: str(tmp_path),
        config.OTEL_JOULES_AGENT_SOCKET: str(tmp_path / "agent.sock"),  # never the host's agent
    }
    meter = EnergyMeter(settings=Settings.from_env(env), gpus=[], sample=False)
    assert [d.id for d in meter.domains] == ["cpu_estimate", "memory_estimate"]
    assert meter.settings.cpu_tdp_watts == 85.0


def test_valid_values_are_used() -> None:
    settings = Settings.from_env(
        {
            config.OTEL_JOULES_CPU_TDP_WATTS: " 120 ",
            config.OTEL_JOULES_MAX_SNAPSHOT_AGE_S: "0",
            config.OTEL_JOULES_CARBON_PROVIDERS: "energidataservice, uk_carbon_intensity",
            config.OTEL_JOULES_DK_PRICE_AREA: "dk2",
            config.OTEL_JOULES_FULL_COMMAND_LINE: "yes",
        }
    )
    assert (settings.cpu_tdp_watts, settings.max_snapshot_age_s) == (120.0, 0.0)
    assert settings.carbon_providers == ("energidataservice", "uk_carbon_intensity")
    assert (settings.dk_price_area, settings.full_command_line) == ("DK2", True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"max_power_watts": float("inf")}, "not a finite number"), ({"cpu_tdp_watts": -1}, "> 0"),
     ({"max_snapshot_age_s": True}, "not a number"), ({"colour": "blue"}, "unknown setting 'colour'")],
)
def test_bad_keywords_in_code_are_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env({}, **overrides)


def test_settings_defaults_are_the_readme_table() -> None:
    # docs/configuration.md's settings table: /sys, 85 W TDP, 0.375 W/GB, 1000 W bound, 0 s snapshot reuse.
    assert Settings.from_env({}) == Settings(
        sysfs_root="/sys",
        cpu_tdp_watts=85.0,
        memory_watts_per_gb=0.375,
        max_power_watts=1000.0,
        max_snapshot_age_s=0.0,
    )
