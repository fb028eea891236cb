"""LLVM code for tensorized tiles (TensorIntrinCall): the intrinsic's LLVM emitter, a call to
its external C function, or the description's loops.

Mixed into :class:`tensor_ir.codegen.llvm.CodeGenLLVM`; uses its builder, ``declare``,
``element_ptr_at`` and options.
"""
from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite import ir

from .. import intrinsics
from ..errors import BuildError
from ..stmt import TensorIntrinCall
from .types import I64, PTR, VOID


class TensorIntrinMixin:
    """Emits one TensorIntrinCall in scalar mode."""

    def tensor_intrin(self, s: TensorIntrinCall) -> None:
        try:
            intrin = intrinsics.get(s.intrin)
            tile = intrinsics.expand(s)  # also checks the call against the registered shapes
        except intrinsics.IntrinsicError as err:
            raise BuildError(f"codegen: {err}") from None
        impl = intrin.impl
        if isinstance(impl, intrinsics.ReferenceImpl):
            self.stmt(tile)
            return
        if impl.contiguous:
            for q, extents in enumerate(s.extents):
                strides = intrinsics.operand_strides(s, q)
                if strides != intrinsics.dense_strides(extents):
                    # Compaction reshaped a buffer after tensorize checked the layout.
                    raise BuildError(
                        f"codegen: operand {s.operands[q].buffer.name} of {s.intrin} has "
                        f"element strides {strides}; the intrinsic needs a dense tile")
        pointers = tuple(self.element_ptr_at(op.buffer, op.indices) for op in s.operands)
        if isinstance(impl, intrinsics.LLVMImpl):
            self._check_target(intrin.name, impl)
            impl.emit(intrinsics.EmitContext(self.builder, pointers, self.declare))
        elif isinstance(impl, intrinsics.ExternCImpl):
            args, types = [], []
            for q, ptr in enumerate(pointers):
                args.append(ptr)
                types.append(PTR)
                for stride in intrinsics.operand_strides(s, q):
                    args.append(ir.Constant(I64, stride))
                    types.append(I64)
            fn = self.declare(impl.symbol, VOID, types)
            if list(fn.function_type.args) != types:
                raise BuildError(f"codegen: C function {impl.symbol} is called with two "
                                 f"different signatures in one module")
            self.builder.call(fn, args)
        else:
            raise BuildError(f"codegen: tensor intrinsic {intrin.name} has an implementation "
                             f"of kind {type(impl).__name__} the LLVM backend cannot emit")

    def _check_target(self, name: str, impl) -> None:
        """Refuse a target without the architecture or features the intrinsic needs: LLVM
        would abort the whole process on an intrinsic it cannot select."""
        triple = self.options.triple or llvm.get_process_triple()
        arch = triple.split("-")[0]
        if arch not in impl.arch:
            raise BuildError(f"codegen: tensor intrinsic {name} needs a "
                             f"{' or '.join(impl.arch)} target, this one is {triple}")
        features = self.options.features
        if features is None and arch == llvm.get_process_triple().split("-")[0]:
            features = llvm.get_host_cpu_features().flatten()
        have = {f.strip() for f in (features or "").split(",") if f.strip()}
        missing = [f for f in impl.features if f not in have]
        if missing:
            raise BuildError(f"codegen: tensor intrinsic {name} needs the target features "
                             f"{', '.join(missing)}, which target {triple} does not list "
                             f"(name them in -mattr)")
