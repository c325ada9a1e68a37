"""MongoDB span exporter: one document per span (needs the ``mongo`` extra: pymongo).

Document shape (what :class:`MongoSpanExporter` inserts)::

    {
      "_id": "<trace_id>-<span_id>",
      "name": "train",
      "trace_id": "<32 hex>", "span_id": "<16 hex>", "parent_span_id": "<16 hex>" | None,
      "start_time": datetime (BSON date, UTC, millisecond precision),
      "end_time":   datetime (same),
      "start_time_unix_nano": 1700000000000000000,   # int64, exact
      "end_time_unix_nano":   1700000001500000000,
      "duration_s": 1.5,
      "service_name": "svc" | None,
      "attributes": {"energy": {"joules": 12.5, "package_0": {"joules": 10.0},
                                "source": "measured", "co2eq": {"grams": 1.2}},
                     "carbon": {"intensity": {"gco2eq_per_kwh": 300.0, "source": "explicit"},
                                "pue": 1.2}}
    }

(``carbon`` only on spans that carry ``carbon.*`` attributes: ``otel-joules run``, the
CarbonTracker.)

The fields are those of :mod:`otel_joules.exporters.records`, except:

- ``start_time``/``end_time`` are BSON dates, so MongoDB can index, sort and expire
  (TTL) by them; the ``*_unix_nano`` integers keep the exact nanoseconds.
- ``attributes`` nests every ``energy.*``, ``carbon.*`` and ``training.*`` attribute by
  its dotted name, so a query path is ``"attributes." + attribute name``:
  ``{"attributes.energy.joules": {"$gt": 100}}``, ``{"attributes.carbon.pue": 1.2}``.
  (MongoDB cannot query field names that contain dots.) Should a name be both a value
  and a prefix of another (``training.epoch`` and ``training.epoch.interrupted``), the
  value is kept under the key ``_value`` of that sub-document. Tuples are arrays; floats stay BSON
  doubles (NaN and infinities included). Text BSON cannot hold (a lone surrogate) is
  stored with that character as the escape text ``\\udXXX``.
- ``_id`` is derived from the trace and span ids, so a retry after a lost reply cannot
  store a span twice: the server's duplicate-key answer counts as "already stored".

Failures: when the server cannot be reached (or refuses the client, e.g. bad
credentials), ``export`` logs one clear error, keeps the documents in memory (at most
``max_pending_spans``; beyond that the oldest are dropped, with an error logged) and
returns ``FAILURE``; the next ``export``, ``force_flush()``, ``shutdown()`` or the
interpreter's exit sends them first. Documents the server rejects one by one (e.g. an
attribute name MongoDB does not accept) are dropped with an error logged, since
retrying cannot help.

Each attempt while the server is down blocks for ``server_selection_timeout_ms`` (the
client's own server selection timeout when ``client`` is given), and no attempt lasts
longer (a server that accepts connections but never answers, or answers slowly, included:
pymongo's ``pymongo.timeout``). After a failed attempt the server is not asked again for
that long: exports in between keep their documents and return at once. Put this exporter
behind a ``BatchSpanProcessor`` (not ``SimpleSpanProcessor``), so that waiting never
happens in the code being measured.

Exit and shutdown are bounded by that timeout too: closing makes at most one last
attempt (none when the server failed while closing or a moment ago), then logs how many
documents could not be stored. With the server down, a process ends about one timeout
after its last span, not one timeout per pending batch.

After ``os.fork()`` the child re-creates the exporter's lock (the parent's batch thread
may hold it across a network call at that moment) and leaves the parent's pending
documents to the parent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime, timezone
from typing import Any, ContextManager, Mapping

from otel_joules.errors import ConfigurationError
from otel_joules.exporters._retrying import DEFAULT_MAX_PENDING_SPANS, RetryingSpanExporter, register_exit_hook
from otel_joules.exporters.errors import MissingExtraError
from otel_joules.exporters.records import AttributeValue, SpanRecord

_LOGGER = logging.getLogger("otel_joules.exporters")

#: Default database and collection names.
DEFAULT_DATABASE = "otel_joules"
DEFAULT_COLLECTION = "spans"
#: How long one attempt waits for a reachable server before giving up.
DEFAULT_SERVER_SELECTION_TIMEOUT_MS = 5_000
#: Key under which a value is kept when its name is also a prefix of another attribute.
LEAF_KEY = "_value"

# MongoDB's duplicate-key error: the document is already stored.
_DUPLICATE_KEY = 11000
# Driver messages (a whole topology description) can run to kilobytes; the log keeps the start.
_MAX_ERROR_TEXT = 400


def _datetime_utc(unix_nano: int | None) -> datetime | None:
    if unix_nano is None:
        return None
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(microsecond=nanos // 1000)


def _bson_text(text: str) -> str:
    """``text``, with lone surrogates (which BSON's UTF-8 cannot hold) as ``\\udXXX`` text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _bson_value(value: AttributeValue) -> Any:
    if isinstance(value, str):
        return _bson_text(value)
    if isinstance(value, (tuple, list)):
        return [_bson_value(item) for item in value]
    return value


def nest_attributes(attributes: Mapping[str, AttributeValue]) -> dict[str, Any]:
    """Turn ``{"energy.package_0.joules": 1.0}`` into ``{"energy": {"package_0": {"joules": 1.0}}}``."""
    root: dict[str, Any] = {}
    for key, raw in attributes.items():
        value = _bson_value(raw)
        *parents, last = _bson_text(key).split(".")
        node = root
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {} if part not in node else {LEAF_KEY: child}
                node[part] = child
            node = child
        if isinstance(node.get(last), dict):
            node[last][LEAF_KEY] = value
        else:
            node[last] = value
    return root


def span_document(record: SpanRecord) -> dict[str, Any]:
    """The document :class:`MongoSpanExporter` inserts for ``record`` (shape: module docstring)."""
    document: dict[str, Any] = {"_id": f"{record.trace_id}-{record.span_id}"}
    document.update(record.core_fields())
    document["name"] = _bson_text(record.name)
    if record.service_name is not None:
        document["service_name"] = _bson_text(record.service_name)
    document["start_time"] = _datetime_utc(record.start_time_unix_nano)
    document["end_time"] = _datetime_utc(record.end_time_unix_nano)
    document["attributes"] = nest_attributes(record.attributes)
    return document


def _write_errors(exc: BaseException) -> list[Mapping[str, Any]] | None:
    """The per-document errors of a bulk insert, or None for any other failure."""
    details = getattr(exc, "details", None)
    if isinstance(details, Mapping) and isinstance(details.get("writeErrors"), list):
        return list(details["writeErrors"])
    return None


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "..."


class MongoSpanExporter(RetryingSpanExporter[dict[str, Any]]):
    """Insert one document per span into ``database.collection`` (shape: module docstring).

    Give either ``uri`` (a ``mongodb://`` or ``mongodb+srv://`` URI; the exporter makes
    and later closes its own ``pymongo.MongoClient``) or ``client`` (any pymongo-
    compatible client, e.g. ``mongomock.MongoClient()``; the caller keeps ownership
    and closes it). Nothing is contacted at construction: a server that is down then
    only delays the spans (see the module docstring).

    Raises :class:`~otel_joules.exporters.errors.MissingExtraError` when pymongo is
    needed and not installed, :class:`~otel_joules.errors.ConfigurationError` for
    unusable arguments.
    """

    _ITEMS = "span document(s)"
    _DELIVERED = "stored"
    _UNDELIVERED = "unsent"
    _WAITING_WHILE = "the server cannot be reached"

    def __init__(
        self,
        uri: str | None = None,
        database: str = DEFAULT_DATABASE,
        collection: str = DEFAULT_COLLECTION,
        client: Any = None,
        *,
        server_selection_timeout_ms: int = DEFAULT_SERVER_SELECTION_TIMEOUT_MS,
        max_pending_spans: int = DEFAULT_MAX_PENDING_SPANS,
    ) -> None:
        for label, name in (("database", database), ("collection", collection)):
            if not isinstance(name, str) or not name:
                raise ConfigurationError(f"{label}={name!r} must be a non-empty name")
        if isinstance(server_selection_timeout_ms, bool) or not isinstance(server_selection_timeout_ms, int) or server_selection_timeout_ms <= 0:
            raise ConfigurationError(
                f"server_selection_timeout_ms={server_selection_timeout_ms!r} must be a positive whole number of milliseconds"
            )
        if (uri is None) == (client is None):
            raise ConfigurationError(
                "give exactly one of uri='mongodb://host:27017' (the exporter makes its own client) "
                "or client=<a pymongo-compatible client>"
            )
        if client is None:
            client = self._make_client(uri, server_selection_timeout_ms)  # type: ignore[arg-type]
            owns_client = True
        else:
            owns_client = False
        # A caller's pymongo client has its own server selection timeout: that is how long
        # one attempt waits for a down server, so it is also the retry interval.
        options = getattr(client, "options", None)
        selection_s = getattr(options, "server_selection_timeout", None)
        if isinstance(selection_s, bool) or not isinstance(selection_s, (int, float)) or selection_s <= 0:
            selection_s = server_selection_timeout_ms / 1000.0
        self._timeout_s = float(selection_s)
        super().__init__(f"MongoDB {database}.{collection}", max_pending_spans, retry_interval_s=self._timeout_s)
        self._owns_client = owns_client
        self._client = client
        self._collection = client[database][collection]
        self._exit_hook = register_exit_hook(self, "_flush_at_exit")

    @staticmethod
    def _make_client(uri: str, server_selection_timeout_ms: int) -> Any:
        try:
            import pymongo
            import pymongo.errors
        except ImportError:
            raise MissingExtraError(
                "MongoSpanExporter needs pymongo, which is not installed: pip install 'otel-joules[mongo]'"
            ) from None
        if not isinstance(uri, str) or not uri:
            raise ConfigurationError(f"uri={uri!r} must be a MongoDB URI such as 'mongodb://localhost:27017'")
        try:
            # connectTimeoutMS bounds the handshake with a server that accepts connections
            # but never answers (the default is 20 s).
            return pymongo.MongoClient(
                uri,
                serverSelectionTimeoutMS=server_selection_timeout_ms,
                connectTimeoutMS=server_selection_timeout_ms,
                appname="otel-joules",
            )
        except (pymongo.errors.PyMongoError, ValueError, TypeError) as exc:
            # The URI itself is not echoed: it may carry a password.
            raise ConfigurationError(f"the MongoDB uri cannot be used: {exc}; see https://www.mongodb.com/docs/manual/reference/connection-string/") from None

    def _encode(self, record: SpanRecord) -> dict[str, Any]:
        return span_document(record)

    def _close(self) -> None:
        if self._owns_client:
            self._client.close()

    def _attempt_bound_s(self) -> float:
        return self._timeout_s

    def _time_bound(self) -> ContextManager[object]:
        """Bound the whole attempt (finding the server, sending, waiting for the answer).

        Server selection alone is bounded by the driver; a server that accepts the
        insert and never answers (or answers slowly) is bounded only by this: pymongo's
        client-side operation timeout, the attempt's bound or what is left of a shutdown.
        """
        try:
            import pymongo
        except ImportError:
            return contextlib.nullcontext()
        timeout = getattr(pymongo, "timeout", None)  # pymongo >= 4.2 (the extra's lower bound)
        if timeout is None:
            return contextlib.nullcontext()
        seconds = self._timeout_s
        if self._attempt_deadline is not None:
            seconds = min(seconds, max(self._attempt_deadline - time.monotonic(), 0.001))
        return timeout(seconds)  # type: ignore[no-any-return]

    def _send_pending(self) -> bool:
        if not self._pending:
            return True
        documents = list(self._pending)
        try:
            with self._time_bound():
                self._collection.insert_many(documents, ordered=False)
        except Exception as exc:  # the driver's errors, whatever client was passed in
            write_errors = _write_errors(exc)
            if write_errors is None:
                self._keep_for_retry(exc)
                return False
            return self._settle_write_errors(write_errors)
        if self._failing:
            _LOGGER.warning("%s is reachable again: stored %d span document(s) kept since the failure", self._label, len(documents))
            self._failing = False
        self._pending.clear()
        return True

    def _keep_for_retry(self, exc: BaseException) -> None:
        if not self._failing:
            _LOGGER.error(
                "cannot store %d span document(s) in %s: %s; they are kept in memory (at most %d) and sent "
                "on the next export, force_flush() or shutdown(): check that the server runs and the URI and "
                "credentials are right",
                len(self._pending),
                self._label,
                _short(exc),
                self._max_pending_spans,
            )
        else:
            _LOGGER.debug("%s still failing (%s); %d pending", self._label, _short(exc), len(self._pending))
        self._mark_failed()
        self._drop_over_limit()

    def _settle_write_errors(self, write_errors: list[Mapping[str, Any]]) -> bool:
        """The server answered: all documents are stored except those it rejected for good."""
        rejected = [error for error in write_errors if error.get("code") != _DUPLICATE_KEY]
        if self._failing:
            _LOGGER.warning("%s is reachable again", self._label)
            self._failing = False
        self._pending.clear()
        if rejected:
            _LOGGER.error(
                "%s rejected %d span document(s), which are dropped (retrying cannot help): %s",
                self._label,
                len(rejected),
                rejected[0].get("errmsg", rejected[0]),
            )
            return False
        return True
