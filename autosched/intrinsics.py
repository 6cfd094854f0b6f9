"""Tensor intrinsics: register those a target's schedules may tensorise with, and no others.

Importing TVM's ``tvm.s_tir.tensor_intrin`` package registers the intrinsics of every kind of
target, which takes seconds (CUDA's alone over ten), and MetaSchedule imports it whenever a
TuneContext is made. `use_tensor_intrinsics` enters the package without running its ``__init__``
and imports only the modules of the target's kind and architecture.

TVM 0.27 registers ``dot_16x4_vnni`` with an implementation that passes ``<16 x i32>`` operands to
``llvm.x86.avx512.vpdpbusd.512``; its LLVM declares ``<64 x i8>`` ones and refuses every program
that MetaSchedule tensorises with it. A working implementation replaces it under the same name.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

VNNI_DOT_16x4 = "dot_16x4_vnni"

_PACKAGE = "tvm.s_tir.tensor_intrin"
_MODULES = {"cuda": ("cuda",), "rocm": ("rocm",), "metal": ("metal",), "hexagon": ("hexagon",)}
_CPU_MODULES = {
    "x86": ("x86",),
    "arm": ("arm_cpu",),
    "aarch64": ("arm_cpu",),
    "riscv": ("riscv_cpu",),
}
_registered: set[str] = set()


def use_tensor_intrinsics(target: dict) -> None:
    """Register the tensor intrinsics that schedules for ``target`` may use (once per process).

    Call before making a TuneContext or replaying a trace for the target.
    """
    modules = _modules(target)
    if not modules or modules[0] in _registered:
        return
    if _PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(_PACKAGE)
        assert spec is not None and spec.submodule_search_locations is not None
        sys.modules[_PACKAGE] = importlib.util.module_from_spec(spec)
    for name in modules:
        importlib.import_module(f"{_PACKAGE}.{name}")
        _registered.add(name)
    if "x86" in modules:
        from tvm.s_tir.tensor_intrin.x86 import dot_product_16x4_u8i8i32_desc

        TensorIntrin.register(VNNI_DOT_16x4, dot_product_16x4_u8i8i32_desc, _dot_16x4_vnni, True)


def _modules(target: dict) -> tuple[str, ...]:
    kind = str(target.get("kind"))
    if kind != "llvm":
        return _MODULES.get(kind, ())
    arch = str(target.get("mtriple") or platform.machine()).split("-")[0].lower()
    if arch in ("x86_64", "i686", "i386", "amd64"):
        arch = "x86"
    return next((mods for prefix, mods in _CPU_MODULES.items() if arch.startswith(prefix)), ())


@T.prim_func(s_tir=True)
def _dot_16x4_vnni(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        a_bytes = T.reinterpret(T.broadcast(a_word, 16), dtype="uint8x64")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
            C.vload([0], dtype="int32x16"),
            a_bytes,
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )
