"""Programs refused before they are built: a vector of more than `MAX_GATHER_LANES` lanes that
gathers (reads a buffer at other than consecutive addresses), inside a loop that MetaSchedule
annotated to be unrolled.

LLVM's code generation for such a program runs for minutes on Intel CPUs: a CNN's global mean,
rfactor'd into rows of 56 lanes that each read every 16th float, built in 63 s for
``-mcpu=rocketlake`` where the same program in 32 lanes built in 0.06 s, and in 0.2 s without
the unroll annotations; for ``znver3`` in 2 s against 0.02 (``benchmarks/gather_builds.py``).
Gathering, such a vector is no faster than two of 32 lanes; a search that proposed it lost its
build timeout, a minute of both builders, to each. Refused, it is a failed build in
milliseconds, and the cost model learns it like any other failure.
"""

from __future__ import annotations

from collections.abc import Iterator

from tvm import ir, s_tir, tirx
from tvm.sym import Analyzer, detect_linear_equation

from autosched.errors import UserError

MAX_GATHER_LANES = 32
"""The widest vector that may gather under an unroll annotation: 32 lanes built in 0.06 s and
49 lanes (the next width a 56x56 mean divides into) in over 30 s, for ``rocketlake``."""

UNROLL_ANNOTATION = "pragma_auto_unroll_max_step"


def check_gathers(func: tirx.PrimFunc) -> None:
    """Refuse ``func`` if a loop annotated to be unrolled holds a vectorized loop of more than
    `MAX_GATHER_LANES` lanes whose block reads a buffer at other than consecutive addresses
    along it (a stride other than 0 or 1 in the flattened buffer, or an index not linear in it).

    Raises:
        UserError: naming the buffer and the vector's lanes, in one line.
    """
    analyzer = Analyzer()
    for realize, vector in _blocks_in_wide_unrolled_vectors(func.body, analyzer):
        for region in realize.block.reads:
            stride = _stride(region, vector.loop_var, analyzer)
            if stride not in (0, 1):
                lanes = int(vector.extent.value)
                raise UserError(
                    f"refused before building: a vector of {lanes} lanes that gathers from "
                    f"{region.source.name} under an unroll annotation, which LLVM can take "
                    f"minutes to build (at most {MAX_GATHER_LANES} lanes may gather)"
                )


def _blocks_in_wide_unrolled_vectors(
    body: tirx.Stmt, analyzer: Analyzer
) -> Iterator[tuple[s_tir.SBlockRealize, tirx.For]]:
    """Each block inside a vectorized loop of more than `MAX_GATHER_LANES` lanes that is itself
    inside a loop annotated to be unrolled, with that vectorized loop; on the way, every loop's
    variable is bound in ``analyzer`` to its range and every block's iterators to their values."""
    stack: list[tuple[tirx.Stmt, bool, tirx.For | None]] = [(body, False, None)]
    while stack:
        stmt, unrolled, vector = stack.pop()
        if isinstance(stmt, tirx.SeqStmt):
            stack.extend((child, unrolled, vector) for child in stmt.seq)
        elif isinstance(stmt, tirx.For):
            analyzer.bind(stmt.loop_var, ir.Range.from_min_extent(stmt.min, stmt.extent))
            step = stmt.annotations.get(UNROLL_ANNOTATION)
            inner_unrolled = unrolled or (step is not None and int(step) > 0)
            if (
                stmt.kind == tirx.ForKind.VECTORIZED
                and isinstance(stmt.extent, tirx.IntImm)
                and stmt.extent.value > MAX_GATHER_LANES
            ):
                vector = stmt
            stack.append((stmt.body, inner_unrolled, vector))
        elif isinstance(stmt, s_tir.SBlockRealize):
            for iterator, value in zip(stmt.block.iter_vars, stmt.iter_values, strict=True):
                analyzer.bind(iterator.var, value)
            if unrolled and vector is not None:
                yield stmt, vector
            stack.append((stmt.block, unrolled, vector))
        elif isinstance(stmt, s_tir.SBlock):
            stack.append((stmt.body, unrolled, vector))
            if stmt.init is not None:
                stack.append((stmt.init, unrolled, vector))
        elif isinstance(stmt, tirx.IfThenElse):
            stack.append((stmt.then_case, unrolled, vector))
            if stmt.else_case is not None:
                stack.append((stmt.else_case, unrolled, vector))
        elif isinstance(stmt, tirx.AttrStmt):
            stack.append((stmt.body, unrolled, vector))


def _stride(region: ir.TensorRegion, var: tirx.Var, analyzer: Analyzer) -> int | None:
    """How far apart in ``region``'s buffer, flattened, consecutive values of ``var`` read; None
    where the address is not linear in ``var``."""
    address: ir.Expr | int = 0
    for span, extent in zip(region.region, region.source.shape, strict=True):
        address = address * int(extent) + span.min
    equation = detect_linear_equation(analyzer.simplify(address), [var])
    if len(equation) != 2 or not isinstance(equation[0], tirx.IntImm):
        return None
    return int(equation[0].value)
