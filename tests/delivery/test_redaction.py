"""process.command_line: values that look like secrets are redacted unless the full line is asked for."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from otel_joules.delivery.redaction import command_line, redact_command

from tests.cli.test_run import run_cli
from tests.helpers.processes import clean_env


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        ("--password=hunter2", "--password=REDACTED"),
        ("--db-password=hunter2", "--db-password=REDACTED"),
        ("--API_KEY=abc", "--API_KEY=REDACTED"),
        ("api_key=abc", "api_key=REDACTED"),
        ("HF_TOKEN=hf_123", "HF_TOKEN=REDACTED"),
        ("AWS_SECRET_ACCESS_KEY=x", "AWS_SECRET_ACCESS_KEY=REDACTED"),
        ("--client-secret=s", "--client-secret=REDACTED"),
        ("postgres://bob:pw@db:5432/x", "postgres://REDACTED:REDACTED@db:5432/x"),
        ("https://h/x?sslmode=1&access_token=t&b=2", "https://h/x?sslmode=1&access_token=REDACTED&b=2"),
        ("Authorization: Bearer abc.def", "Authorization: REDACTED"),
        ("cookie: a=b", "cookie: REDACTED"),
        # Not secrets: kept as they are.
        ("--max-tokens=256", "--max-tokens=256"),
        ("--tokenizer=bert", "--tokenizer=bert"),
        ("--author=me", "--author=me"),
        ("--bypass-cache=1", "--bypass-cache=1"),
        ("https://example.com/path", "https://example.com/path"),
        ("--password=", "--password="),
    ],
)
def test_one_argument(argument: str, expected: str) -> None:
    assert redact_command([argument]) == [expected]


def test_a_secret_flag_redacts_its_separate_value_only() -> None:
    command = ["app", "--token", "abc", "--max-new-tokens", "64", "--password", "--verbose", "x"]
    assert redact_command(command) == [
        "app", "--token", "REDACTED", "--max-new-tokens", "64", "--password", "--verbose", "x"
    ]


def test_full_command_line_is_shell_quoted() -> None:
    command = ["curl", "-H", "Authorization: Bearer t", "https://u:p@h/"]
    assert command_line(command) == "curl -H 'Authorization: REDACTED' https://REDACTED:REDACTED@h/"
    assert command_line(command, full=True) == "curl -H 'Authorization: Bearer t' https://u:p@h/"


def _exported_command_line(tmp_path: Path, extra_env: dict[str, str]) -> str:
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": str(tmp_path), **extra_env})
    result = run_cli(["--exporter", "console", "--", sys.executable, "-c", "pass", "--password=hunter2", "--token", "t0k"], env)
    assert result.returncode == 0, result.stderr
    # The console exporter's span JSON (on whichever stream the SDK writes it).
    (value,) = re.findall(r'"process\.command_line": (".*?(?<!\\)")', result.stdout + result.stderr)
    return json.loads(value)


def test_otel_joules_run_exports_the_redacted_line_unless_asked(tmp_path: Path) -> None:
    assert _exported_command_line(tmp_path, {}) == f"{sys.executable} -c pass --password=REDACTED --token REDACTED"
    full = _exported_command_line(tmp_path, {"OTEL_JOULES_FULL_COMMAND_LINE": "true"})
    assert full == f"{sys.executable} -c pass --password=hunter2 --token t0k"
