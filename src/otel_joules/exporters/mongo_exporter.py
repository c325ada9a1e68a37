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
                                "pue": 1.2}},
      "resource": {"host": {"name": "node-7"}, "slurm": {"job": {"id": "4242"}}}
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
  and a prefix of another (none of otel-joules' own is; a user's ``training.*`` attribute may be,
  or an old name beside a new one), the value is kept under the key ``_value`` of that sub-document. Tuples are arrays; floats stay BSON
  doubles (NaN and infinities included). Text BSON cannot hold (a lone surrogate) is
  stored with that character as U+FFFD.
- ``resource`` nests the exported resource attributes (host, user, job:
  :data:`~otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`) the same way:
  ``{"resource.host.name": "node-7"}``; ``{}`` when the resource has none.
- ``_id`` is derived from the trace and span ids, so a retry after a lost reply cannot
  store a span twice: the server's duplicate-key answer counts as "already stored".

Failures: when the server cannot be reached (or refuses the client, e.g. bad
credentials), ``export`` logs one clear error, keeps the documents in memory and returns
``FAILURE``; the next ``export``, ``force_flush()``, ``shutdown()`` or the interpreter's
exit sends them first. The bound is ``max_pending_spans`` documents (default 10 000):
beyond it the oldest are dropped, with one error the first time in an outage (later
drops are counted, not logged again). One line ends the outage: a warning when the
server is back, with how many kept documents it stored and how many were dropped in
all, or an error at ``shutdown()`` or exit with how many are lost. An outage the bound
outlasts thus loses nothing and logs one error and one warning.

Documents the server rejects (an attribute name it does not accept; a value it cannot
hold) are dropped with an error logged, since retrying cannot help; the batch's other
documents are stored. A server may answer one such document with an error for the whole
insert, or by closing the connection, rather than with an error for that document: then
the batch is sent again one document at a time to find it (a document is refused when
its insert fails so, twice for a closed connection, while the server answers a ping), and
if the server refuses every one of them the fault is taken to be the server's and they
are all kept for retry. FerretDB 1.24 (SQLite), which the tests run against, is such a
server: it closes the connection on a NaN, fails the insert for an infinity inside an
array, refuses other infinities per document (MongoDB stores all of these), and stores
``-0.0`` as ``0.0``.

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
from otel_joules.errors import MissingExtraError
from otel_joules.exporters.records import AttributeValue, SpanRecord, valid_text

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
# Unauthorized, AuthenticationFailed: the server refuses the client, not the documents.
_CLIENT_REFUSED = frozenset({13, 18})
# Driver messages (a whole topology description) can run to kilobytes; the log keeps the start.
_MAX_ERROR_TEXT = 400


def _datetime_utc(unix_nano: int | None) -> datetime | None:
    if unix_nano is None:
        return None
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(microsecond=nanos // 1000)


def _bson_text(text: str) -> str:
    """``text``, with lone surrogates (which BSON's UTF-8 cannot hold) as U+FFFD."""
    return valid_text(text)


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
    document["resource"] = nest_attributes(record.resource)
    return document


def _write_errors(exc: BaseException) -> list[Mapping[str, Any]] | None:
    """The per-document errors of a bulk insert, or None for any other failure."""
    details = getattr(exc, "details", None)
    if isinstance(details, Mapping) and isinstance(details.get("writeErrors"), list):
        return list(details["writeErrors"])
    return None


def _rejection(error: Mapping[str, Any], documents: list[dict[str, Any]]) -> str:
    """Why the server rejected one document of a bulk insert, naming the document."""
    index = error.get("index")
    where = f" (_id {documents[index]['_id']!r})" if isinstance(index, int) and 0 <= index < len(documents) else ""
    return f"{error.get('errmsg', error)}{where}"


def _command_error(exc: BaseException) -> bool:
    """True when the server answered the insert with a command error about the request itself.

    Not when the attempt ran out of time, nor when the server refuses the client
    (credentials, permissions): retrying those later can succeed.
    """
    try:
        from pymongo.errors import OperationFailure
    except ImportError:
        return False
    if not isinstance(exc, OperationFailure) or getattr(exc, "timeout", False):
        return False
    return getattr(exc, "code", None) not in _CLIENT_REFUSED


def _connection_dropped(exc: BaseException) -> bool:
    """True when the connection was closed under the insert (not a timeout, nor a server not found in time)."""
    try:
        from pymongo.errors import AutoReconnect
    except ImportError:
        return False
    return isinstance(exc, AutoReconnect) and not getattr(exc, "timeout", False)


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

    Raises :class:`~otel_joules.errors.MissingExtraError` when pymongo is
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

    def _deadline(self) -> float:
        """When the attempt starting now must give up (``time.monotonic()``): one timeout, or what closing has left."""
        deadline = time.monotonic() + self._timeout_s
        if self._attempt_deadline is not None:
            deadline = min(deadline, self._attempt_deadline)
        return deadline

    def _time_bound(self, deadline: float) -> ContextManager[object]:
        """Bound one insert (finding the server, sending, waiting for the answer) by ``deadline``.

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
        return timeout(max(deadline - time.monotonic(), 0.001))  # type: ignore[no-any-return]

    def _insert(self, documents: list[dict[str, Any]], deadline: float) -> tuple[list[str], BaseException | None]:
        """Insert ``documents``: the server's reasons for those it rejected for good, or the error that stopped it all."""
        try:
            with self._time_bound(deadline):
                self._collection.insert_many(documents, ordered=False)
        except Exception as exc:  # the driver's errors, whatever client was passed in
            write_errors = _write_errors(exc)
            if write_errors is None:
                return [], exc
            return [_rejection(error, documents) for error in write_errors if error.get("code") != _DUPLICATE_KEY], None
        return [], None

    def _send_pending(self) -> bool:
        if not self._pending:
            return True
        documents = list(self._pending)
        deadline = self._deadline()
        rejected, exc = self._insert(documents, deadline)
        if exc is not None and len(documents) > 1 and self._refused(exc, deadline):
            return self._insert_one_by_one(documents, exc, deadline)
        if exc is not None:
            self._keep_for_retry(exc)
            return False
        self._pending.clear()
        self._stored(len(documents) - len(rejected))
        return self._drop_rejected(rejected)

    def _answers_ping(self, deadline: float) -> bool:
        """True when the server answers a ``ping`` before ``deadline``."""
        try:
            with self._time_bound(deadline):
                self._client.admin.command("ping")
        except Exception:  # the driver's errors, whatever client was passed in
            return False
        return True

    def _refused(self, exc: BaseException, deadline: float) -> bool:
        """True when the server refused the insert that raised ``exc`` for what it was sent.

        A command error says so; so does a connection closed under the insert by a server
        that answers a ping right after (FerretDB closes the connection on a NaN). A
        server that cannot be reached, or that refuses the client, has not.
        """
        return _command_error(exc) or (_connection_dropped(exc) and self._answers_ping(deadline))

    def _insert_one_by_one(self, documents: list[dict[str, Any]], batch_error: BaseException, deadline: float) -> bool:
        """The server refused a whole batch: find the documents it refuses, store the others.

        A server may answer one unstorable document with an error for the whole insert,
        or by closing the connection, rather than with one error per document (FerretDB
        does both): retrying the batch would then fail forever and hold back every span
        queued behind it. One insert per document tells them apart. When the server
        refuses every one of them, the fault is taken to be the server's (a broken disk,
        say): nothing is dropped and the batch is kept for retry, as when it cannot be
        reached. Time runs out at ``deadline``: the documents not tried yet wait for the
        next attempt.
        """
        rejected: list[str] = []
        done = refused = 0
        stopped_by: BaseException | None = None
        for document in documents:
            if time.monotonic() >= deadline:
                break
            reasons, exc = self._insert([document], deadline)
            if exc is not None and _connection_dropped(exc) and self._answers_ping(deadline):
                # Once more: a connection lost by chance is not the document's fault.
                reasons, exc = self._insert([document], deadline)
            if exc is None:
                rejected.extend(reasons)
            elif self._refused(exc, deadline):
                refused += 1
                reason = f"the server closed the connection on it ({_short(exc)})" if _connection_dropped(exc) else _short(exc)
                rejected.append(f"{reason} (_id {document['_id']!r})")
            else:  # the server went away, or the attempt ran out of time: the rest wait
                stopped_by = exc
                break
            done += 1
        if done and refused == done:
            self._keep_for_retry(batch_error)
            return False
        for _ in range(done):
            self._pending.popleft()
        if done:
            self._stored(done - len(rejected))
        delivered = self._drop_rejected(rejected)
        if stopped_by is not None:
            self._keep_for_retry(stopped_by)
        return delivered and not self._pending

    def _stored(self, count: int) -> None:
        """``count`` documents are settled (stored, or rejected for good): the server works; end an outage."""
        if self._failing:
            dropped = self._mark_recovered()
            _LOGGER.warning(
                "%s is reachable again: stored %d span document(s) kept since the failure%s", self._label, count, dropped
            )

    def _drop_rejected(self, rejected: list[str]) -> bool:
        """Log the documents the server rejected for good (they are dropped); True when there are none."""
        if not rejected:
            return True
        _LOGGER.error(
            "%s rejected %d span document(s), which are dropped (retrying cannot help): %s",
            self._label,
            len(rejected),
            rejected[0],
        )
        return False

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
