"""An allow-list of the Python syntax a TVMScript definition may use before TVM's parser, which
evaluates its expressions, sees it: for `autosched submit --file`, whose file may come from
anyone, so that sending it to a server never runs it here, and for a Relax model file given to
`autosched tune`, which may also use ``R.`` (see ``autosched.model.load``).

Allowed: the definition itself (``@T.prim_func`` functions, an ``@I.ir_module`` class of them),
assignments, loops, ``with``, ``if``, literals, arithmetic and comparisons, names, subscripts,
calls of ``T.``/``I.`` functions and ``range``, and plain strings (dtypes, block and axis names)
that cannot be read as code. An attribute chain is allowed when it is exactly a name TVMScript's
parsers define: ``T.grid``, ``T.axis.spatial``, ``R.nn.conv2d``, ``I.ir_module``, none of the
modules they import (``T.entry.inspect.os`` is refused), and none that calls code outside the
program (``T.call_extern``, ``R.call_packed``). Anything else is refused with the line it stands
on.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from types import ModuleType

from autosched.errors import UserError

_NODES = (
    ast.Module, ast.FunctionDef, ast.ClassDef, ast.arguments, ast.arg, ast.Expr, ast.Assign,
    ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.withitem, ast.If, ast.Pass, ast.Return,
    ast.Name, ast.Load, ast.Store, ast.Constant, ast.Attribute, ast.Call, ast.keyword,
    ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.Dict, ast.BinOp, ast.UnaryOp, ast.BoolOp,
    ast.Compare, ast.IfExp, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
    ast.Import, ast.ImportFrom, ast.alias,
)  # fmt: skip
_ROOTS = frozenset({"T", "I"})
_NAMESPACES = {
    "T": ("axis",),
    "R": ("builtin", "ccl", "dist", "grad", "image", "memory", "nn", "vision", "vm"),
    "I": (),
}
"""The namespaces of TVMScript's names (``T.axis.remap``, ``R.nn.relu``), by the name the parser
binds its module to."""
_LEAVING_THE_PROGRAM = {
    "T": {
        "Call", "call_extern", "call_pure_extern", "call_packed", "call_cpacked",
        "call_packed_lowered", "call_cpacked_lowered", "call_intrin", "call_pure_intrin",
        "call_llvm_intrin", "call_llvm_pure_intrin", "call_ffi_kernel", "call_kernel",
        "tvm_call_packed", "tvm_call_cpacked", "tvm_call_packed_lowered",
        "tvm_call_cpacked_lowered", "anylist_setitem_call_packed", "anylist_setitem_call_cpacked",
        "llvm_lookup_intrinsic_id", "start_profile_intrinsic", "end_profile_intrinsic",
    },
    "R": {
        "call_packed", "call_pure_packed", "call_dps_packed", "call_inplace_packed",
        "call_builtin_with_ctx", "call_py_func", "ExternFunc", "extern", "builtin", "vm",
    },
}  # fmt: skip
"""TVMScript names that call code outside the program (external, packed or LLVM functions, the
VM's builtins, Python), refused although TVMScript defines them: a file's program may compute
only with its own operators, as admission requires of a program from outside."""
_CALLABLE_NAMES = {"range"}
_PLAIN_STRING = re.compile(r"[A-Za-z0-9_.:\-/ ]*")
_IMPORTS = {"tvm", "tvm.script"}


def check_script(
    text: str,
    name: str,
    *,
    roots: frozenset[str] = _ROOTS,
    purpose: str = "a program sent to a server",
) -> None:
    """Refuse TVMScript ``text`` (of the workload ``name``) that uses anything but the syntax
    this module allows; ``roots`` are the names whose attributes it may use and call (a Relax
    model adds ``R``, and ``cls``, the alias of its module class, whose attributes are the
    functions the text defines), ``purpose`` says in the message what the text is.

    Raises:
        UserError: the first construct that is not allowed, with its line.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise UserError(f"{name}: line {err.lineno}: {err.msg}") from None
    functions = frozenset(node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    for node in ast.walk(tree):
        problem = _problem(node, roots, functions)
        if problem is not None:
            line = getattr(node, "lineno", "?")
            raise UserError(f"{name}: line {line}: {problem}, which {purpose} may not use")


def _problem(node: ast.AST, roots: frozenset[str], functions: frozenset[str]) -> str | None:
    if not isinstance(node, _NODES):
        return f"a {type(node).__name__}"
    if isinstance(node, ast.Import | ast.ImportFrom):
        module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
        return None if module in _IMPORTS else f"an import of {module}"
    if isinstance(node, ast.Attribute):
        root, chain = _chain(node)
        if root not in roots:
            return f"an attribute of something but {_listed(roots)}"
        known = _script_names(root) if root in _NAMESPACES else functions
        return None if chain in known else f"the attribute {root}.{chain} (not a TVMScript name)"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in _CALLABLE_NAMES:
            return None
        if isinstance(func, ast.Attribute) and _chain(func)[0] in roots:
            return None
        return f"a call of something but range or a function of {_listed(roots)}"
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bytes):
            return "a bytes literal"
        if isinstance(node.value, str) and (
            "__" in node.value or not _PLAIN_STRING.fullmatch(node.value)
        ):
            return f"the string {node.value[:40]!r}"
    if isinstance(node, ast.arg | ast.FunctionDef | ast.AnnAssign) and _string_annotation(node):
        return "a string annotation"
    if isinstance(node, ast.Name) and node.id.startswith("__"):
        return f"the name {node.id}"
    return None


@cache
def _script_names(root: str) -> frozenset[str]:
    """The names TVMScript's parser defines under ``root`` (``T``, ``R`` or ``I``), dotted below
    it (``grid``, ``axis.spatial``): what its module and namespaces hold but the modules they
    import."""
    from tvm.script import parser  # the modules TVM's parser binds T, R and I to

    module = {"T": parser.tirx, "R": parser.relax, "I": parser.ir}[root]
    names = _public(module) | set(_NAMESPACES[root])
    for space in _NAMESPACES[root]:
        names |= {f"{space}.{member}" for member in _public(getattr(module, space))}
    leaving = _LEAVING_THE_PROGRAM.get(root, set())
    return frozenset(name for name in names if name.split(".")[0] not in leaving)


def _public(namespace: object) -> set[str]:
    return {
        name
        for name in dir(namespace)
        if not name.startswith("_") and not isinstance(getattr(namespace, name), ModuleType)
    }


def _chain(node: ast.Attribute) -> tuple[str | None, str]:
    """The name an attribute chain starts from and the dotted rest: ``T.axis.remap`` is
    (``T``, ``axis.remap``); the name is None for a chain on anything but a name."""
    parts = []
    value: ast.expr = node
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    root = value.id if isinstance(value, ast.Name) else None
    return root, ".".join(reversed(parts))


def _string_annotation(node: ast.arg | ast.FunctionDef | ast.AnnAssign) -> bool:
    annotation = node.returns if isinstance(node, ast.FunctionDef) else node.annotation
    return isinstance(annotation, ast.Constant) and isinstance(annotation.value, str)


def _listed(roots: frozenset[str]) -> str:
    """``T, I or R``: the allowed roots in words."""
    names = sorted(roots, key="TIR".find)
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
