"""Code generation backends: lowered PrimFunc -> target code."""
from __future__ import annotations

from .compile import CompiledModule, JITModule, LLVMTarget, compile_module
from .llvm import META_SYMBOL, CodegenOptions, codegen

__all__ = ["codegen", "CodegenOptions", "META_SYMBOL", "compile_module", "CompiledModule",
           "JITModule", "LLVMTarget"]
