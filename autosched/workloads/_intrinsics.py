"""A working VNNI tensor intrinsic for the int8 workloads.

TVM 0.27 registers ``dot_16x4_vnni`` with an implementation that passes ``<16 x i32>`` operands to
``llvm.x86.avx512.vpdpbusd.512``; its LLVM declares ``<64 x i8>`` ones and refuses every program
that MetaSchedule tensorises with it. This replaces the implementation under the same name.
"""

from __future__ import annotations

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from autosched.schedule import use_tensor_intrinsics

VNNI_DOT_16x4 = "dot_16x4_vnni"


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


def register_vnni_intrinsic() -> None:
    """Register the x86 intrinsics (as tuning does), then replace the VNNI implementation."""
    use_tensor_intrinsics("llvm")
    from tvm.s_tir.tensor_intrin.x86 import dot_product_16x4_u8i8i32_desc

    TensorIntrin.register(VNNI_DOT_16x4, dot_product_16x4_u8i8i32_desc, _dot_16x4_vnni, True)
