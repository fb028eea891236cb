"""TuningRecord, with the error kinds and its stable JSON form.

A ``TuningRecord`` is what the database keeps of one measured candidate (the tuner makes it
from the runner's ``search.measure.MeasureResult``): its workload key, target string and
trace (as JSON, never as a Python object), the result, and where, when, with which library
version and with which measurement settings it was measured.

The trace hash is the SHA-256 of the trace's canonical JSON text (sorted keys, no spaces; the
same text as ``schedules.Trace.to_text()``), decisions included: two candidates with the same
hash are the same program on replay, so a resumed search never measures one twice.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import socket
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from tensor_ir.target import Target

from .keys import canonical_json

__all__ = [
    "ERROR_KINDS",
    "RECORD_FORMAT_VERSION",
    "TuningRecord",
    "canonical_json",
    "host_name",
    "json_dict",
    "library_version",
    "trace_hash",
    "trace_text",
]

# What went wrong with a candidate.  "build": lowering / codegen / compilation failed or timed
# out; "timeout": the kernel ran longer than MeasureConfig.timeout; "crash": the kernel killed
# its process (segfault, abort, ...); "wrong_result": its output differs from the reference (or
# it wrote into an input); "runtime": anything else while running (artifact would not load,
# target is not this machine, the reference could not be computed).
ERROR_KINDS = ("build", "timeout", "crash", "wrong_result", "runtime")

# Version of TuningRecord.to_json's layout (the JSON-lines export uses it per line).
RECORD_FORMAT_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Canonical JSON, trace hash, provenance
# ---------------------------------------------------------------------------------------------

def trace_text(trace) -> str:
    """Canonical JSON text of a trace given as a ``schedules.Trace``, its ``to_json()`` dict or
    JSON text.  Equal to ``Trace.to_text()``."""
    if isinstance(trace, str):
        try:
            trace = json.loads(trace)
        except json.JSONDecodeError as err:
            raise ValueError(f"trace JSON text does not parse: {err}") from None
    elif hasattr(trace, "to_json") and not isinstance(trace, Mapping):
        trace = trace.to_json()
    if not isinstance(trace, Mapping):
        raise TypeError(f"a trace is given as a Trace, its JSON dict or JSON text, got "
                        f"{type(trace).__name__}")
    version = trace.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"trace JSON needs an integer format_version, got {version!r}")
    if not isinstance(trace.get("instructions"), (list, tuple)):
        raise ValueError("trace JSON needs an 'instructions' list")
    try:
        return canonical_json(trace)
    except (TypeError, ValueError) as err:
        raise ValueError(f"trace is not JSON-serialisable: {err}") from None


def trace_hash(trace) -> str:
    """SHA-256 (hex) of the trace's canonical JSON, decisions included."""
    return hashlib.sha256(trace_text(trace).encode()).hexdigest()


@lru_cache(maxsize=None)
def library_version() -> str:
    """The installed autotune distribution's version ("unknown" when not installed)."""
    from importlib import metadata

    try:
        return metadata.version("autotune")
    except metadata.PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=None)
def host_name() -> str:
    return socket.gethostname() or "unknown"


def json_dict(value, what: str) -> dict:
    """A plain-JSON copy of a dict or dataclass (tuples become lists); ``what`` names the
    value in errors."""
    if value is None:
        return {}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict or a dataclass, got {type(value).__name__}")
    try:
        return json.loads(json.dumps(dict(value), sort_keys=True))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is not JSON-serialisable: {err}") from None


# ---------------------------------------------------------------------------------------------
# TuningRecord
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class TuningRecord:
    """One measured candidate as the database stores it.

    workload_key   the workload's structural hash (``Workload.key``).
    target         canonical target string (``str(Target(...))``); a Target is converted.
    trace_json     the trace as JSON (a Trace or JSON text is converted), decisions included.
    run_times      seconds per call, one per repeat; empty on error.
    median         median of run_times (computed when None); math.inf on error.
    error_kind     None or one of ERROR_KINDS; error_msg says why.
    host, version, timestamp   where, with which library version, and when (seconds since
                   the epoch) it was measured.
    config         the measurement settings (a MeasureConfig or any dataclass/dict of JSON).
    details        the rest of the MeasureResult (number, checked, stopped_early, seconds).

    Read back from a database a record also carries ``record_id``, ``score`` (the median
    used for ranking: re-measurements pooled in), ``remeasure_count`` and ``fingerprint``
    (the hardware it was measured on); these do not take part in equality.
    Derived attributes: ``trace_text`` (canonical JSON), ``trace_hash`` and ``uid`` (a
    content hash that identifies the record across databases; imports de-duplicate on it).
    """

    workload_key: str
    target: str
    trace_json: dict
    run_times: tuple = ()
    median: float | None = None
    error_kind: str | None = None
    error_msg: str | None = None
    host: str = ""
    version: str = ""
    timestamp: float = 0.0
    config: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    record_id: int | None = None
    score: float | None = None
    remeasure_count: int = 0
    fingerprint: dict | None = field(default=None, repr=False)
    trace_text: str = field(init=False, repr=False)
    trace_hash: str = field(init=False, repr=False)
    uid: str = field(init=False, repr=False)

    def __post_init__(self):
        setattr_ = object.__setattr__
        if not isinstance(self.workload_key, str) or not self.workload_key:
            raise ValueError("TuningRecord.workload_key must be a non-empty string")
        target = self.target
        if not isinstance(target, str):
            if not isinstance(target, Target):
                raise TypeError(f"TuningRecord.target must be a target string or Target, got "
                                f"{type(target).__name__}")
            target = str(target)
        if not target:
            raise ValueError("TuningRecord.target must be a non-empty target string")
        setattr_(self, "target", target)
        text = trace_text(self.trace_json)
        setattr_(self, "trace_text", text)
        setattr_(self, "trace_json", json.loads(text))
        setattr_(self, "trace_hash", hashlib.sha256(text.encode()).hexdigest())
        # 1. Run times and the median: errors have none and sort last.
        times = tuple(float(t) for t in self.run_times)
        for t in times:
            if not (math.isfinite(t) and t >= 0):
                raise ValueError(f"TuningRecord.run_times must be finite and >= 0, got {t!r}")
        setattr_(self, "run_times", times)
        if self.error_kind is not None:
            if self.error_kind not in ERROR_KINDS:
                raise ValueError(f"unknown error kind {self.error_kind!r}; expected one of "
                                 f"{', '.join(ERROR_KINDS)}")
            setattr_(self, "median", math.inf)
        else:
            if self.error_msg is not None:
                raise ValueError("TuningRecord.error_msg is set but error_kind is None")
            if not times:
                raise ValueError("a successful TuningRecord needs at least one run time")
            median = statistics.median(times) if self.median is None else float(self.median)
            if not (math.isfinite(median) and median >= 0):
                raise ValueError(f"TuningRecord.median must be finite and >= 0, got {median!r}")
            setattr_(self, "median", median)
        # 2. Provenance and settings, as plain JSON.
        setattr_(self, "timestamp", float(self.timestamp))
        setattr_(self, "host", str(self.host))
        setattr_(self, "version", str(self.version))
        setattr_(self, "config", json_dict(self.config, "TuningRecord.config"))
        setattr_(self, "details", json_dict(self.details, "TuningRecord.details"))
        # 3. The uid: what makes two records the same measurement.  Re-measurements and
        # database ids are not part of it, so an exported record matches its original.
        identity = canonical_json([self.workload_key, target, self.trace_hash,
                                   repr(self.timestamp), self.host, list(times),
                                   self.error_kind])
        setattr_(self, "uid", hashlib.sha256(identity.encode()).hexdigest())

    # -- construction ---------------------------------------------------------------------------
    @staticmethod
    def from_stored(values: dict) -> TuningRecord:
        """A record read back from a database the database itself wrote: every field is
        given, the trace text is already canonical and the hashes are stored with it, so
        the checks and re-serialisation of ``__init__`` are skipped (reading a whole
        workload's records for a cost model is then a JSON parse per record).  ``values``
        holds every field, ``trace_text``, ``trace_hash`` and ``uid`` included."""
        record = object.__new__(TuningRecord)
        for name in TuningRecord.__dataclass_fields__:
            object.__setattr__(record, name, values[name])
        return record

    # -- views ----------------------------------------------------------------------------------
    @property
    def is_error(self) -> bool:
        return self.error_kind is not None

    def trace(self):
        """The trace as a ``schedules.Trace`` (ready for ``.apply(func)``)."""
        from schedules.trace import Trace

        return Trace.from_json(self.trace_json)

    def _identity(self) -> tuple:
        return (self.workload_key, self.target, self.trace_text, self.run_times, self.median,
                self.error_kind, self.error_msg, self.host, self.version, self.timestamp,
                canonical_json(self.config), canonical_json(self.details))

    def __eq__(self, other) -> bool:
        if not isinstance(other, TuningRecord):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self.uid)

    # -- JSON -----------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """JSON-compatible dict (one line of a JSON-lines export, without its ``kind``)."""
        out = {
            "format_version": RECORD_FORMAT_VERSION,
            "workload_key": self.workload_key,
            "target": self.target,
            "trace": self.trace_json,
            "trace_hash": self.trace_hash,
            "run_times": list(self.run_times),
            "median": None if self.is_error else self.median,
            "error_kind": self.error_kind,
            "error_msg": self.error_msg,
            "host": self.host,
            "version": self.version,
            "timestamp": self.timestamp,
            "config": self.config,
            "details": self.details,
        }
        if self.fingerprint is not None:
            out["fingerprint"] = self.fingerprint
        return out

    @staticmethod
    def from_json(data: Mapping) -> TuningRecord:
        """Rebuild a record from :meth:`to_json` output.  Raises ValueError naming the field
        that is missing, unknown or malformed, and when the stored trace hash does not match
        the trace (an edited or damaged line)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a record is a JSON object, got {type(data).__name__}")
        version = data.get("format_version")
        if version != RECORD_FORMAT_VERSION:
            raise ValueError(f"record format_version is {version!r}; this release reads "
                             f"{RECORD_FORMAT_VERSION}")
        required = ("workload_key", "target", "trace", "run_times", "timestamp")
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"record lacks field(s) {', '.join(missing)}")
        allowed = set(required) | {"format_version", "trace_hash", "median", "error_kind",
                                   "error_msg", "host", "version", "config", "details",
                                   "fingerprint"}
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"record has unknown field(s) {', '.join(sorted(unknown))}")
        if not isinstance(data["run_times"], list):
            raise ValueError("record field run_times must be a list of seconds")
        fingerprint = data.get("fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, Mapping):
            raise ValueError("record field fingerprint must be an object or null")
        try:
            record = TuningRecord(
                data["workload_key"], data["target"], data["trace"],
                run_times=tuple(data["run_times"]), median=data.get("median"),
                error_kind=data.get("error_kind"), error_msg=data.get("error_msg"),
                host=data.get("host", ""), version=data.get("version", ""),
                timestamp=data["timestamp"], config=data.get("config") or {},
                details=data.get("details") or {},
                fingerprint=dict(fingerprint) if fingerprint is not None else None)
        except TypeError as err:
            raise ValueError(str(err)) from None
        stored = data.get("trace_hash")
        if stored is not None and stored != record.trace_hash:
            raise ValueError(f"record trace_hash {stored} does not match its trace "
                             f"(sha256 {record.trace_hash}); the trace was changed")
        return record
