"""``MongoHandler``: one MongoDB document per trace, in pyJoules' shape (needs pymongo).

Document (pyJoules 0.5.1)::

    {"name": "trace_0",
     "trace": [{"timestamp": 1700000000.5, "tag": "foo", "duration": 0.25,
                "energy": {"package_0": 1500000.0, "nvidia_gpu_0": 30000000.0}}]}

``name`` is ``trace_name_prefix`` + the trace's number, counted from 0 per handler.
Energy is in microjoules for every domain, the GPU included.

Fixed pyJoules bugs: a failed ``save_data()`` (server down) raises
:class:`MongoSaveError` and keeps the traces, with their numbers, for the next
``save_data()``; traces still held at interpreter exit are saved then. As in pyJoules,
the server is contacted when the handler is created, so a wrong URI or a server that
is down fails there (:class:`MongoInitError`), before anything is measured.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.exception import PyJoulesException
from otel_joules.pyjoules.handler.handler import EnergyHandler

# Driver messages (a whole topology description) can run to kilobytes; errors keep the start.
_MAX_ERROR_TEXT = 400


class MongoInitError(PyJoulesException):
    """The database cannot be reached or used; raised when the handler is created."""


class MongoSaveError(PyJoulesException):
    """Saving failed (server down, ...); the traces are kept for the next ``save_data()``."""


def sample_to_dict(sample: EnergySample) -> Dict[str, Any]:
    """A sample as the document part pyJoules stores."""
    return {"timestamp": sample.timestamp, "tag": sample.tag, "duration": sample.duration, "energy": dict(sample.energy)}


def trace_to_dict(trace: Iterable[EnergySample], trace_name: str) -> Dict[str, Any]:
    """A trace as the document pyJoules stores."""
    return {"name": trace_name, "trace": [sample_to_dict(sample) for sample in trace]}


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "..."


class MongoHandler(EnergyHandler):
    """Collects traces; :meth:`save_data` inserts one document per trace into ``database_name.collection_name``.

    Args:
        uri: MongoDB URI (``mongodb://host:27017``).
        database_name: Database name.
        collection_name: Collection name.
        connected_timeout: Milliseconds the driver waits for a server (connect and
            server selection), as in pyJoules.
        trace_name_prefix: Documents are named ``<prefix><number>``.
        client: A pymongo-compatible client to use instead of connecting to ``uri``
            (e.g. ``mongomock.MongoClient()``); the caller keeps ownership.

    Raises:
        MongoInitError: pymongo is missing, the URI is invalid or the server cannot be reached.
    """

    flushes_at_exit = True

    def __init__(
        self,
        uri: str,
        database_name: str,
        collection_name: str,
        connected_timeout: int = 30000,
        trace_name_prefix: str = "trace_",
        *,
        client: Any = None,
    ) -> None:
        self.trace_id = 0
        self.trace_name_prefix = trace_name_prefix
        if client is None:
            client = self._connect(uri, connected_timeout)
        try:
            self._collection = client[database_name][collection_name]
        except Exception as exc:  # the driver's InvalidName and friends
            raise MongoInitError(f"cannot use {database_name!r}.{collection_name!r}: {_short(exc)}") from None
        self._target = f"{database_name}.{collection_name}"
        super().__init__()

    @staticmethod
    def _connect(uri: str, connected_timeout: int) -> Any:
        try:
            import pymongo
            import pymongo.errors
        except ImportError:
            raise MongoInitError("MongoHandler needs pymongo, which is not installed: pip install 'otel-joules[mongo]'") from None
        try:
            client = pymongo.MongoClient(uri, connectTimeoutMS=connected_timeout, serverSelectionTimeoutMS=connected_timeout)
        except (pymongo.errors.PyMongoError, ValueError, TypeError) as exc:
            # The URI is not echoed: it may carry a password.
            raise MongoInitError(f"invalid MongoDB uri: {_short(exc)}") from None
        try:
            client.admin.command("ping")
        except Exception as exc:  # ServerSelectionTimeoutError, OperationFailure (auth), ...
            client.close()
            raise MongoInitError(
                f"the MongoDB server cannot be reached within connected_timeout={connected_timeout} ms: {_short(exc)}; "
                "check that it runs and that the URI and credentials are right"
            ) from None
        return client

    def save_data(self) -> None:
        """Insert one document per held trace, then forget them.

        Raises:
            MongoSaveError: the insert failed; every trace is kept (with its number) for the next call.
        """
        with self._lock:
            traces: List[EnergyTrace] = list(self.traces)
            if not traces:
                return
            documents = [
                trace_to_dict(trace, f"{self.trace_name_prefix}{self.trace_id + offset}") for offset, trace in enumerate(traces)
            ]
            try:
                self._collection.insert_many(documents)
            except Exception as exc:  # the driver's errors, whatever client this is
                raise MongoSaveError(
                    f"cannot store {len(documents)} trace(s) in MongoDB {self._target}: {_short(exc)}; they are kept "
                    "and saved by the next save_data() or at interpreter exit"
                ) from None
            self.trace_id += len(documents)
            self._forget(len(traces))
