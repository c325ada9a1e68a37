"""Handler outputs byte for byte as pyJoules 0.5.1 writes them: print line, CSV, DataFrame, MongoDB documents.

The expected texts were checked once against pyJoules 0.5.1's own handlers fed the same
samples (identical bytes); here they are literals, so the format cannot drift.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import mongomock
import pandas
import pytest

from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.energy_meter import measure_energy
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.exception import PyJoulesWarning
from otel_joules.pyjoules.handler import PrintHandler
from otel_joules.pyjoules.handler.csv_handler import CSVHandler, CSVHeaderMismatchError, CSVPathError
from otel_joules.pyjoules.handler.mongo_handler import MongoHandler, MongoInitError, MongoSaveError
from otel_joules.pyjoules.handler.pandas_handler import NoSampleProcessedError, PandasHandler, trace_to_dataframe

from tests.fakes.mongo_wire import FakeMongoServer
from tests.helpers.processes import closed_port
from tests.fakes.powercap import FakePowercap
from tests.helpers.processes import REPO


def make_trace(offset: float = 0.0) -> EnergyTrace:
    return EnergyTrace(
        [
            EnergySample(1700000000.5 + offset, "foo", 0.25, {"package_0": 1500000.0, "dram_0": 250000.0, "nvidia_gpu_0": 30000000.0}),
            EnergySample(1700000000.75 + offset, "bar", 1e-05, {"package_0": 0.0, "dram_0": 61.0, "nvidia_gpu_0": 1000.0},
                         below_resolution=True),
        ]
    )


HEADER = "timestamp;tag;duration;package_0;dram_0;nvidia_gpu_0;energy.below_resolution\n"
ROWS = "1700000000.5;foo;0.25;1500000.0;250000.0;30000000.0;False\n1700000000.75;bar;1e-05;0.0;61.0;1000.0;True\n"
#: pyJoules' own layout (and ours before the below-resolution column): appended to in that layout.
PYJOULES_HEADER = "timestamp;tag;duration;package_0;dram_0;nvidia_gpu_0\n"
PYJOULES_ROWS = "1700000000.5;foo;0.25;1500000.0;250000.0;30000000.0\n1700000000.75;bar;1e-05;0.0;61.0;1000.0\n"


# Print ------------------------------------------------------------------------------------


def test_print_line(capsys: pytest.CaptureFixture[str]) -> None:
    PrintHandler().process(make_trace())
    assert capsys.readouterr().out == (
        "begin timestamp : 1700000000.5; tag : foo; duration : 0.25; package_0 : 1500000.0; dram_0 : 250000.0; "
        "nvidia_gpu_0 : 30000000.0\n"
        "begin timestamp : 1700000000.75; tag : bar; duration : 1e-05; package_0 : 0.0; dram_0 : 61.0; nvidia_gpu_0 : 1000.0\n"
    )


# CSV --------------------------------------------------------------------------------------


def test_csv_bytes(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    handler = CSVHandler(str(path))
    assert not path.exists()  # checking the path creates nothing
    handler.process(make_trace())
    handler.save_data()
    assert path.read_bytes() == (HEADER + ROWS).encode()
    assert handler.traces == []
    # A second handler appends under the same header, as pyJoules does.
    again = CSVHandler(path)
    again.process(make_trace())
    again.save_data()
    assert path.read_bytes() == (HEADER + ROWS + ROWS).encode()


def test_csv_from_the_decorator(tmp_path: Path, powercap: FakePowercap, shared_meter: CoreEnergyMeter) -> None:
    handler = CSVHandler(tmp_path / "result.csv")

    @measure_energy(handler=handler)
    def foo() -> None:
        powercap.zones["package_0"].advance_joules(2)
        powercap.zones["dram_0"].advance_uj(3)

    for _ in range(3):
        foo()
    handler.save_data()
    lines = (tmp_path / "result.csv").read_text().splitlines()
    assert lines[0] == "timestamp;tag;duration;package_0;dram_0;core_0;uncore_0;energy.below_resolution"
    assert len(lines) == 4
    for line in lines[1:]:
        timestamp, tag, duration, *energy, below = line.split(";")
        assert tag == "foo" and float(timestamp) > 0 and float(duration) > 0
        assert energy == ["2000000.0", "3.0", "0.0", "0.0"]
        # core_0 and uncore_0 show 0.0 for a call shorter than RAPL's 1 ms update: the row says so.
        assert below == str(float(duration) < 0.001)


def test_csv_same_domains_in_another_order_follow_the_file(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    path.write_text("timestamp;tag;duration;nvidia_gpu_0;package_0;dram_0\n")
    handler = CSVHandler(path)
    handler.process(make_trace())
    handler.save_data()
    assert path.read_text().splitlines()[1] == "1700000000.5;foo;0.25;30000000.0;1500000.0;250000.0"


def test_csv_header_without_rows_for_other_domains_gives_way(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    with pytest.warns(PyJoulesWarning):
        CSVHandler(path).save_data()  # nothing measurable: the header alone
    handler = CSVHandler(path)
    handler.process(make_trace())
    handler.save_data()
    assert path.read_text() == HEADER + ROWS


def test_csv_missing_domain_is_an_empty_cell_and_odd_tags_are_quoted(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    handler = CSVHandler(path)
    handler.process(
        EnergyTrace(
            [
                EnergySample(1.5, "a;b", 0.5, {"package_0": 1.0, "nvidia_gpu_0": 2.0}),
                EnergySample(2.5, 'say "hi"', 0.5, {"package_0": 3.0}),  # the GPU failed meanwhile
            ]
        )
    )
    handler.save_data()
    assert path.read_text() == (
        "timestamp;tag;duration;package_0;nvidia_gpu_0;energy.below_resolution\n"
        '1.5;"a;b";0.5;1.0;2.0;False\n'
        '2.5;"say ""hi""";0.5;3.0;;False\n'
    )


def test_csv_nothing_to_save_writes_the_header_and_warns_once(tmp_path: Path) -> None:
    handler = CSVHandler(tmp_path / "result.csv")
    with pytest.warns(PyJoulesWarning, match="no measurement to save.*holds its header only") as caught:
        handler.save_data()  # pyJoules raised IndexError; we wrote no file, so the next line of a script failed
        handler.save_data()
    assert len(caught) == 1
    assert (tmp_path / "result.csv").read_text() == "timestamp;tag;duration;energy.below_resolution\n"


def test_csv_in_pyjoules_layout_is_appended_to_in_that_layout(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    path.write_text(PYJOULES_HEADER)
    handler = CSVHandler(path)
    handler.process(make_trace())
    handler.save_data()
    assert path.read_text() == PYJOULES_HEADER + PYJOULES_ROWS


def test_csv_file_cut_mid_line_gets_a_newline_first(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    path.write_text(HEADER + "1700000000.5;foo;0.2")
    handler = CSVHandler(path)
    handler.process(make_trace())
    handler.save_data()
    assert path.read_text() == HEADER + "1700000000.5;foo;0.2\n" + ROWS


CSV_DISK_FULL = r"""
import json, os, resource, signal, sys
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.handler.csv_handler import CSVHandler, CSVWriteError
path = sys.argv[1]
handler = CSVHandler(path)
handler.process(EnergyTrace([EnergySample(1.0, "t" * 500, 0.5, {"package_0": 1.0})]))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
size = os.path.getsize(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
try:
    handler.save_data()
    error = None
except CSVWriteError as exc:
    error = str(exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
kept = len(handler.traces)
size_after_failure = os.path.getsize(path)
handler.save_data()
print(json.dumps({"error": error, "kept": kept, "size": size, "size_after_failure": size_after_failure,
                  "lines": open(path).read().count("\n")}))
"""


def test_csv_failed_write_leaves_the_file_unchanged_and_keeps_the_traces(tmp_path: Path) -> None:
    import json

    path = tmp_path / "result.csv"
    path.write_text("timestamp;tag;duration;package_0\n")
    proc = subprocess.run([sys.executable, "-c", CSV_DISK_FULL, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["error"].startswith(f"[Errno 27] cannot append to {str(path)!r}: File too large; the file is unchanged")
    assert out["kept"] == 1 and out["size_after_failure"] == out["size"]
    assert out["lines"] == 2  # the retry wrote the kept row


# DataFrame ----------------------------------------------------------------------------------


def test_dataframe_columns_and_values() -> None:
    frame = trace_to_dataframe(make_trace())
    assert list(frame.columns) == [
        "timestamp", "tag", "duration", "package_0", "dram_0", "nvidia_gpu_0", "energy.below_resolution"
    ]
    assert frame.to_dict("records") == [
        {"timestamp": 1700000000.5, "tag": "foo", "duration": 0.25, "package_0": 1500000.0, "dram_0": 250000.0,
         "nvidia_gpu_0": 30000000.0, "energy.below_resolution": False},
        {"timestamp": 1700000000.75, "tag": "bar", "duration": 1e-05, "package_0": 0.0, "dram_0": 61.0,
         "nvidia_gpu_0": 1000.0, "energy.below_resolution": True},
    ]
    numeric = ["timestamp", "duration", "package_0", "dram_0", "nvidia_gpu_0"]
    assert [str(frame[c].dtype) for c in numeric] == ["float64"] * 5
    assert not pandas.api.types.is_numeric_dtype(frame["tag"])
    assert trace_to_dataframe(EnergyTrace([])).empty


def test_pandas_handler_collects_every_trace() -> None:
    handler = PandasHandler()
    with pytest.raises(NoSampleProcessedError, match="no measurement has reached this PandasHandler"):
        handler.get_dataframe()
    handler.process(make_trace())
    handler.process(EnergyTrace([EnergySample(3.0, "late", 1.0, {"package_0": 5.0})]))  # dram and GPU failed
    frame = handler.get_dataframe()
    assert list(frame["tag"]) == ["foo", "bar", "late"]
    assert frame["package_0"].tolist() == [1500000.0, 0.0, 5.0]
    assert math.isnan(frame["nvidia_gpu_0"].iloc[2])
    assert pandas.api.types.is_float_dtype(frame["nvidia_gpu_0"])


# MongoDB ------------------------------------------------------------------------------------


def stored(collection: mongomock.Collection) -> list[dict[str, object]]:
    return [{k: v for k, v in document.items() if k != "_id"} for document in collection.find()]


def test_mongo_documents() -> None:
    client = mongomock.MongoClient()
    handler = MongoHandler("mongodb://unused", "db", "coll", client=client)
    handler.process(make_trace())
    handler.process(make_trace(offset=10))
    handler.save_data()
    handler.process(make_trace())
    handler.save_data()
    documents = stored(client["db"]["coll"])
    assert [d["name"] for d in documents] == ["trace_0", "trace_1", "trace_2"]
    assert documents[0] == {
        "name": "trace_0",
        "trace": [
            {"timestamp": 1700000000.5, "tag": "foo", "duration": 0.25,
             "energy": {"package_0": 1500000.0, "dram_0": 250000.0, "nvidia_gpu_0": 30000000.0}},
            {"timestamp": 1700000000.75, "tag": "bar", "duration": 1e-05,
             "energy": {"package_0": 0.0, "dram_0": 61.0, "nvidia_gpu_0": 1000.0}},
        ],
    }
    assert list(documents[0]["trace"][0]["energy"]) == ["package_0", "dram_0", "nvidia_gpu_0"]
    assert handler.traces == []


def test_mongo_with_pyjoules_arguments_through_pymongo() -> None:
    with mongomock.patch(servers=(("db.example", 27017),)):
        handler = MongoHandler("mongodb://db.example:27017", "db", "coll", 30000, "run_")
        handler.process(make_trace())
        handler.save_data()
        import pymongo

        documents = list(pymongo.MongoClient("mongodb://db.example:27017")["db"]["coll"].find())
    assert [d["name"] for d in documents] == ["run_0"]


def test_mongo_server_down_at_construction_fails_there() -> None:
    port = closed_port()
    with pytest.raises(MongoInitError, match=r"cannot be reached within connected_timeout=200 ms"):
        MongoHandler(f"mongodb://127.0.0.1:{port}", "db", "coll", connected_timeout=200)


@pytest.fixture
def mongo_server() -> Iterator[list[FakeMongoServer]]:
    servers: list[FakeMongoServer] = []
    yield servers
    for server in servers:
        server.stop()


def test_mongo_save_while_down_keeps_the_traces_and_their_names(mongo_server: list[FakeMongoServer]) -> None:
    server = FakeMongoServer().start()
    mongo_server.append(server)
    port = server.port
    handler = MongoHandler(f"mongodb://127.0.0.1:{port}", "db", "coll", connected_timeout=1500)
    handler.process(make_trace())
    server.stop()
    with pytest.raises(MongoSaveError, match=r"cannot store 1 trace\(s\) in MongoDB db.coll: .*they are kept"):
        handler.save_data()
    assert len(handler.traces) == 1 and handler.trace_id == 0
    handler.process(make_trace(offset=1))
    back = FakeMongoServer(port).start()
    mongo_server.append(back)
    handler.save_data()
    assert [d["name"] for d in back.documents("db.coll")] == ["trace_0", "trace_1"]
    assert back.documents("db.coll")[1]["trace"][0]["timestamp"] == 1700000001.5
    assert handler.traces == []


# Exit -----------------------------------------------------------------------------------------

AT_EXIT = r"""
import sys
from pathlib import Path
import otel_joules
from tests.fakes.powercap import make_powercap
from otel_joules.pyjoules.energy_meter import measure_energy, EnergyContext
from otel_joules.pyjoules.handler.csv_handler import CSVHandler
from otel_joules.pyjoules.handler.mongo_handler import MongoHandler
pc = make_powercap(Path(sys.argv[1]) / "sys", "one_socket")
otel_joules.get_energy_meter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
csv_handler = CSVHandler(sys.argv[1] + "/result.csv")
mongo_handler = MongoHandler(sys.argv[2], "db", "coll", connected_timeout=5000)

@measure_energy(handler=csv_handler)
def foo():
    pc.zones["package_0"].advance_uj(42)

foo()
with EnergyContext(handler=mongo_handler, start_tag="s") as ctx:
    pc.zones["dram_0"].advance_uj(7)
# No save_data(): the handlers must write what they hold at exit.
"""


def test_handlers_save_what_they_hold_at_exit(tmp_path: Path, mongo_server: list[FakeMongoServer]) -> None:
    server = FakeMongoServer().start()
    mongo_server.append(server)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(AT_EXIT), str(tmp_path), f"mongodb://127.0.0.1:{server.port}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "result.csv").read_text().splitlines()
    assert lines[0] == "timestamp;tag;duration;package_0;dram_0;core_0;uncore_0;energy.below_resolution"
    assert lines[1].split(";")[1] == "foo" and lines[1].split(";")[3:7] == ["42.0", "0.0", "0.0", "0.0"]
    (document,) = server.documents("db.coll")
    assert document["name"] == "trace_0"
    assert [(s["tag"], s["energy"]["dram_0"]) for s in document["trace"]] == [("s", 7.0)]
    assert "lost" not in proc.stderr


# Paths -----------------------------------------------------------------------------------------


def test_unwritable_csv_path_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(CSVPathError, match=r"No such file or directory \(the folder .* does not exist\)"):
        CSVHandler(tmp_path / "no-such-folder" / "result.csv")
    with pytest.raises(CSVPathError, match="is a folder; give a file path such as"):
        CSVHandler(tmp_path)
    with pytest.raises(CSVPathError, match="must be a file path"):
        CSVHandler(42)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_csv_header_with_other_domains_is_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "result.csv"
    original = "timestamp;tag;duration;package_0;dram_0\n1.0;old;0.5;1.0;2.0\n"
    path.write_text(original)
    handler = CSVHandler(path)
    handler.process(make_trace())
    with pytest.raises(CSVHeaderMismatchError, match=r"starts with the header 'timestamp;tag;duration;package_0;dram_0'"):
        handler.save_data()
    assert path.read_text() == original
    assert len(handler.traces) == 1  # kept: nothing measured is lost


# Planted links (issue 24, item 6) ---------------------------------------------------------

SECRET = b"# a file the handler must never touch\n"


def test_csv_link_at_the_path_is_refused_when_the_handler_is_created(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_bytes(SECRET)
    link = tmp_path / "result.csv"
    link.symlink_to(target)
    with pytest.raises(CSVPathError) as caught:
        CSVHandler(link)
    assert "\n" not in str(caught.value)
    assert "is a symbolic link" in str(caught.value) and "remove the link" in str(caught.value)
    assert target.read_bytes() == SECRET


def test_csv_link_planted_before_saving_is_refused_and_the_traces_kept(tmp_path: Path) -> None:
    target = tmp_path / "bashrc"
    target.write_bytes(SECRET)
    path = tmp_path / "result.csv"
    handler = CSVHandler(path)
    handler.process(make_trace())
    path.symlink_to(target)
    with pytest.raises(CSVPathError, match="is a symbolic link.*the traces are kept"):
        handler.save_data()
    assert target.read_bytes() == SECRET
    assert len(handler.traces) == 1
    path.unlink()
    handler.save_data()
    assert path.read_bytes() == (HEADER + ROWS).encode()
    assert os.stat(path).st_mode & 0o002 == 0
