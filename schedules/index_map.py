"""IndexMap: a layout map kept as IR, so that a trace can store it as JSON and print it."""
from __future__ import annotations

from tensor_ir.expr import Var

from .errors import ScheduleError
from .frozen import thaw

__all__ = ["IndexMap"]


class IndexMap:
    """An index map kept as IR (parameters and result expressions), so that it has a JSON form
    and prints as a lambda.  ``IndexMap.recording(fn)`` wraps a Python callable and captures its
    first application to fresh variables (which is how the layout primitives call it)."""

    def __init__(self, fn=None, params=None, results=None):
        self.fn = fn
        self.params = params
        self.results = results

    @staticmethod
    def recording(fn) -> "IndexMap":
        if isinstance(fn, IndexMap):
            return fn
        if not callable(fn):
            raise ScheduleError(f"index_map must be callable, got {fn!r}")
        return IndexMap(fn)

    def __call__(self, *indices):
        from tensor_ir.expr import const
        from tensor_ir.visitor import substitute

        if self.fn is None:
            mapping = dict(zip(self.params, indices))
            return tuple(substitute(r, mapping) for r in self.results)
        out = self.fn(*indices)
        if self.params is None and all(isinstance(i, Var) for i in indices):
            results = tuple(out) if isinstance(out, (list, tuple)) else (out,)
            self.params = tuple(indices)
            self.results = tuple(const(r) if isinstance(r, int) else r for r in results)
        return out

    def to_json(self):
        from tensor_ir.func import to_json

        if self.params is None:
            raise ScheduleError("index_map was never applied to index variables; it cannot be "
                                "recorded in the trace")
        return to_json((self.params, self.results))

    @staticmethod
    def from_json(data) -> "IndexMap":
        from tensor_ir.func import from_json

        try:
            params, results = from_json(thaw(data))
        except (TypeError, ValueError, KeyError) as err:
            raise ScheduleError(f"malformed index_map in trace: {err}") from None
        return IndexMap(None, tuple(params), tuple(results))

    def as_python(self) -> str:
        names = [p.name for p in self.params]
        body = ", ".join(_py_index_expr(r) for r in self.results)
        return f"lambda {', '.join(names)}: ({body}{',' if len(self.results) == 1 else ''})"


def _py_index_expr(e) -> str:
    from tensor_ir.expr import BinOp, IntImm

    if isinstance(e, Var):
        return e.name
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, BinOp):
        a, b = _py_index_expr(e.a), _py_index_expr(e.b)
        if e.op in ("min", "max"):
            return f"te.{e.op}({a}, {b})"
        return f"({a} {e.op} {b})"
    raise ScheduleError(f"index_map expression {e!r} cannot be printed as Python")
