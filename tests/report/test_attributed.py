"""``otel-joules report`` sums the spans' attributed share, never interval energy, and shows both, labelled.

Hand-written exports in all three span formats (our CSV, our JSON lines, OTLP/JSON) of one
trace: a server span whose children are two overlapping requests. The host drew 100 J
while the server span ran (its ``energy.joules``) and 60 J / 70 J while each request ran
(overlapping intervals); the attribution gave the server 30 J inclusive (5 J of its own,
15 J and 10 J to the requests). An older export without ``energy.attributed.*`` falls
back to interval energy and says so.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from otel_joules.cli.main import main
from otel_joules.exporters.csv_exporter import ATTRIBUTES_COLUMN
from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report import build_report, format_report, report_dict

J_PER_KWH = 3.6e6
TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT, REQ1, REQ2 = "b7ad6b7169203331", "00f067aa0ba902b7", "53995c3f42cd8ad8"
T0 = 1_700_000_000_000_000_000

ROOT_ATTRS: dict[str, Any] = {
    "energy.joules": 100.0,
    "energy.package_0.joules": 70.0,
    "energy.dram_0.joules": 10.0,
    "energy.nvidia_gpu_0.joules": 20.0,
    "energy.core_0.joules": 30.0,  # inside package_0: not a kind of its own
    "energy.source": "measured",
    "energy.co2eq.grams": 100.0 / J_PER_KWH * 360.0,
    "energy.attributed.joules": 30.0,
    "energy.attributed.self.joules": 5.0,
    "energy.attributed.cpu.joules": 20.0,
    "energy.attributed.memory.joules": 4.0,
    "energy.attributed.gpu.joules": 6.0,
    "energy.attributed.co2eq.grams": 30.0 / J_PER_KWH * 360.0,
    "energy.attributed.self.co2eq.grams": 5.0 / J_PER_KWH * 360.0,
    "energy.attribution": "cpu_time_share",
    "carbon.intensity.gco2eq_per_kwh": 360.0,
    "carbon.intensity.source": "explicit",
    "carbon.pue": 1.0,
}
REQ1_ATTRS: dict[str, Any] = {
    "energy.joules": 60.0,
    "energy.source": "measured",
    "energy.attributed.joules": 15.0,
    "energy.attributed.self.joules": 15.0,
    "carbon.intensity.gco2eq_per_kwh": 360.0,
    "carbon.pue": 1.0,
}
REQ2_ATTRS: dict[str, Any] = {
    "energy.joules": 70.0,
    "energy.source": "measured",
    "energy.attributed.joules": 10.0,
    "energy.attributed.self.joules": 10.0,
    "carbon.intensity.gco2eq_per_kwh": 360.0,
    "carbon.pue": 1.0,
}


def _spans(keep: Callable[[str], bool] = lambda key: True) -> list[dict[str, Any]]:
    spans = [
        ("serve", ROOT, None, 0, 10, ROOT_ATTRS),
        ("GET /a", REQ1, ROOT, 1, 7, REQ1_ATTRS),
        ("GET /b", REQ2, ROOT, 2, 9, REQ2_ATTRS),
    ]
    return [
        {
            "name": name,
            "trace_id": TRACE,
            "span_id": span_id,
            "parent_span_id": parent,
            "start_time_unix_nano": T0 + start * 1_000_000_000,
            "end_time_unix_nano": T0 + end * 1_000_000_000,
            "service_name": "api",
            "attributes": {k: v for k, v in attrs.items() if keep(k)},
        }
        for name, span_id, parent, start, end, attrs in spans
    ]


def _write_csv(path: Path, spans: list[dict[str, Any]]) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*CORE_FIELDS, ATTRIBUTES_COLUMN])
    for span in spans:
        row = {**span, "start_time": "", "end_time": "", "duration_s": ""}
        writer.writerow([row[field] if row[field] is not None else "" for field in CORE_FIELDS] + [json.dumps(span["attributes"])])
    path.write_text(out.getvalue())


def _write_jsonl(path: Path, spans: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(span) + "\n" for span in spans))


def _otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"stringValue": value}
    return {"doubleValue": value}


def _write_otlp(path: Path, spans: list[dict[str, Any]]) -> None:
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "api"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": span["trace_id"],
                                "spanId": span["span_id"],
                                **({"parentSpanId": span["parent_span_id"]} if span["parent_span_id"] else {}),
                                "name": span["name"],
                                "startTimeUnixNano": str(span["start_time_unix_nano"]),
                                "endTimeUnixNano": str(span["end_time_unix_nano"]),
                                "attributes": [{"key": k, "value": _otlp_value(v)} for k, v in span["attributes"].items()],
                            }
                            for span in spans
                        ]
                    }
                ],
            }
        ]
    }
    path.write_text(json.dumps(request) + "\n")


WRITERS = {"spans.csv": _write_csv, "spans.jsonl": _write_jsonl, "otlp.jsonl": _write_otlp}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_attributed_share_is_summed_and_interval_energy_shown_beside_it(tmp_path: Path, name: str) -> None:
    WRITERS[name](tmp_path / name, _spans())
    report = build_report([tmp_path / name])
    (run,) = report.runs
    assert run.energy_basis == "attributed share"
    assert run.joules == 30.0  # the server's inclusive share, not 100 J, and not 30 + 15 + 10
    assert run.host_interval_joules == 100.0  # topmost energy.joules: the children are inside
    assert run.spans_counted == 1
    assert run.energy_kwh == 30.0 / J_PER_KWH
    assert run.co2eq_grams == pytest.approx(30.0 / J_PER_KWH * 360.0, rel=1e-12)  # of the share
    assert [(p.kind, p.joules, p.source) for p in run.parts] == [
        ("cpu", 20.0, "measured"),
        ("memory", 4.0, "measured"),
        ("gpu", 6.0, "measured"),
    ]
    assert report.total_joules == 30.0 and report.host_interval_joules == 100.0

    text = format_report(report)
    header, _, row = text.splitlines()[2:5]
    assert "counted" in header and "host interval J" in header
    assert "30.000  attributed" in row and "100.000" in row
    assert "host interval energy of the attributed runs: 100.000 J" in text
    data = report_dict(report)
    assert data["runs"][0]["energy_basis"] == "attributed share"
    assert data["runs"][0]["host_interval_joules"] == 100.0
    assert data["totals"]["energy_joules"] == 30.0 and data["totals"]["host_interval_joules"] == 100.0


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_self_shares_alone_add_up_to_the_same_total(tmp_path: Path, name: str) -> None:
    # An export that kept only energy.attributed.self.joules (and interval energy).
    WRITERS[name](tmp_path / name, _spans(lambda key: key != "energy.attributed.joules" and ".attributed.co2" not in key))
    (run,) = build_report([tmp_path / name]).runs
    assert run.energy_basis == "attributed share"
    assert run.joules == 30.0 and run.spans_counted == 3  # 5 + 15 + 10
    assert run.host_interval_joules == 100.0
    # Grams from the recorded intensity (no attributed grams kept), of the share.
    assert run.co2eq_grams == pytest.approx(30.0 / J_PER_KWH * 360.0, rel=1e-12)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_older_exports_fall_back_to_interval_energy_labelled_as_such(tmp_path: Path, name: str) -> None:
    WRITERS[name](tmp_path / name, _spans(lambda key: not key.startswith("energy.attributed")))
    report = build_report([tmp_path / name])
    (run,) = report.runs
    assert run.energy_basis == "interval energy"
    assert run.joules == 100.0 and run.host_interval_joules is None
    # Interval energy is the basis here, so the intensity applies to it.
    assert run.co2eq_grams == pytest.approx(100.0 / J_PER_KWH * 360.0, rel=1e-12)
    assert any("no energy.attributed.* attributes" in note for note in run.notes)
    assert [(p.kind, p.joules) for p in run.parts] == [("cpu", 70.0), ("memory", 10.0), ("gpu", 20.0)]
    text = format_report(report)
    assert "100.000  interval" in text.splitlines()[4]
    assert "host interval J" not in text


def test_attributed_grams_never_come_from_the_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_JOULES_COUNTRY", raising=False)
    # Attributed share without intensity or attributed grams, but with the interval's
    # grams: those are of 100 J, not of the 30 J share, so the fallback intensity is used.
    keep = lambda key: not key.startswith("carbon.") and key != "energy.attributed.co2eq.grams"  # noqa: E731
    _write_jsonl(tmp_path / "spans.jsonl", _spans(keep))
    (run,) = build_report([tmp_path / "spans.jsonl"]).runs
    assert run.joules == 30.0
    assert run.intensity_source == "world_average"
    assert run.co2eq_grams == pytest.approx(30.0 / J_PER_KWH * 445.0, rel=1e-12)


def test_cli_json_carries_both_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_otlp(tmp_path / "otlp.jsonl", _spans())
    _write_jsonl(tmp_path / "old.jsonl", [{**s, "trace_id": "1" * 32} for s in _spans(lambda k: not k.startswith("energy.attributed"))])
    assert main(["report", "--json", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    bases = {run["run_id"]: (run["energy_basis"], run["energy_joules"], run["host_interval_joules"]) for run in data["runs"]}
    assert bases == {TRACE: ("attributed share", 30.0, 100.0), "1" * 32: ("interval energy", 100.0, None)}
    assert data["totals"]["energy_joules"] == 130.0


def _one_span(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    (span,) = [s for s in _spans() if s["parent_span_id"] is None]
    return [{**span, "attributes": {"energy.source": "measured", **attributes}}]


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_domain_the_id_rules_do_not_know_is_classified_by_energy_domain_kinds(tmp_path: Path, name: str) -> None:
    domains = {"energy.joules": 100.0, "energy.soc-0.joules": 70.0, "energy.dram_0.joules": 10.0, "energy.nvidia_gpu_0.joules": 20.0}
    WRITERS[name](tmp_path / name, _one_span({**domains, "energy.domain_kinds": "soc-0:cpu dram_0:memory nvidia_gpu_0:gpu"}))
    (run,) = build_report([tmp_path / name]).runs
    assert [(p.kind, p.joules) for p in run.parts] == [("cpu", 70.0), ("memory", 10.0), ("gpu", 20.0)]
    # The same span exported before spans carried the kinds: the id rules know no "soc", its energy is "other".
    (tmp_path / "old").mkdir()
    WRITERS[name](tmp_path / "old" / name, _one_span(domains))
    (old,) = build_report([tmp_path / "old" / name]).runs
    assert [(p.kind, p.joules) for p in old.parts] == [("memory", 10.0), ("gpu", 20.0), ("other", 70.0)]


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_domain_absent_from_energy_domain_kinds_adds_to_no_kind(tmp_path: Path, name: str) -> None:
    # dram_0 is on the span (a domain measured as detail) but not in the total: the attribute leaves it out,
    # where the id rules would have made it memory (and the parts would no longer add up to energy.joules).
    attributes = {
        "energy.joules": 90.0,
        "energy.package_0.joules": 70.0,
        "energy.dram_0.joules": 10.0,
        "energy.nvidia_gpu_0.joules": 20.0,
        "energy.domain_kinds": "package_0:cpu nvidia_gpu_0:gpu",
    }
    WRITERS[name](tmp_path / name, _one_span(attributes))
    (run,) = build_report([tmp_path / name]).runs
    assert [(p.kind, p.joules) for p in run.parts] == [("cpu", 70.0), ("gpu", 20.0)]
