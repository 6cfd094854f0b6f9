"""The registry of built-in workloads: parameters declared as data, checked before a build.

Definitions live in the sibling modules (``linalg``, ``nn``, ...); each registers itself with
:func:`register_workload`. Nothing here knows about any particular workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from autosched.errors import UserError
from autosched.workload import Workload

MAX_BUFFER_ELEMENTS = 2**31 - 1  # past this, buffers need 64-bit indexing
PRESET = "preset"  # the pseudo-parameter that names one of a workload's presets
WEIGHTS = "weights"  # the pseudo-parameter naming the inputs that are constant weights


@dataclass(frozen=True)
class Param:
    """A workload parameter: ``int`` within ``min``..``max``, or ``str`` among ``choices``."""

    name: str
    type: type
    default: object
    help: str
    choices: tuple[str, ...] | None = None
    min: int | None = 1
    max: int | None = 1 << 16

    def parse(self, value: object, workload: str) -> object:
        """Check ``value`` (typed, or a string from the command line) and return it typed.

        Raises:
            UserError: the value does not parse, is out of bounds or is not one of the choices.
        """
        where = f"parameter {self.name} of {workload}"
        if self.type is int:
            return self._parse_int(value, where)
        if not isinstance(value, str):
            raise UserError(f"{where} must be a string, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise UserError(f"{where} must be one of {', '.join(self.choices)}; got {value!r}")
        return value

    def _parse_int(self, value: object, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise UserError(f"{where} must be an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise UserError(f"{where} must be an integer, got {value!r}") from None
        if self.min is not None and number < self.min:
            raise UserError(f"{where} must be at least {self.min}, got {number}")
        if self.max is not None and number > self.max:
            raise UserError(f"{where} must be at most {self.max}, got {number}")
        return number


@dataclass(frozen=True)
class WorkloadSpec:
    """A built-in workload: its name, a one-line description, its parameters and its builder.

    ``build`` takes every parameter as a keyword argument, already checked, and may raise
    :class:`UserError` for combinations that single parameters cannot rule out. ``presets`` name
    parameter sets from the literature (ResNet-50 layers, ...); a preset only fills parameters, so
    a workload built from one is the same workload as with its parameters spelled out.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    build: Callable[..., Workload]
    presets: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


_SPECS: dict[str, WorkloadSpec] = {}


def register_workload(
    name: str,
    description: str,
    *params: Param,
    presets: Mapping[str, Mapping[str, object]] | None = None,
) -> Callable[[Callable[..., Workload]], Callable[..., Workload]]:
    """Decorator that registers a builder under ``name``; the builder is returned unchanged."""

    def register(build: Callable[..., Workload]) -> Callable[..., Workload]:
        if name in _SPECS:
            raise ValueError(f"workload {name!r} is registered twice")
        _SPECS[name] = WorkloadSpec(name, description, params, build, dict(presets or {}))
        return build

    return register


def workload_specs() -> list[WorkloadSpec]:
    """Every registered workload, sorted by name."""
    return [_SPECS[name] for name in sorted(_SPECS)]


def get_workload(name: str, params: Mapping[str, object] | None = None) -> Workload:
    """Build the registered workload ``name``; parameters not given take their defaults.

    The pseudo-parameter ``preset`` fills the parameters of one of the workload's presets; the
    parameters given with it override the preset's. The pseudo-parameter ``weights`` names the
    inputs (comma-separated, e.g. ``B`` of matmul) that are constant weights, as a deployed
    model's are: they become layout-free buffers, which a schedule may store in a layout of its
    own choosing (MetaSchedule's ``RewriteLayout``), packed once ahead of the calls.

    Raises:
        UserError: unknown workload, preset or parameter, a bad value, or a buffer too large.
    """
    spec = _SPECS.get(name)
    if spec is None:
        raise UserError(f"unknown workload {name!r}; known workloads: {', '.join(sorted(_SPECS))}")
    given = dict(params or {})
    if PRESET in given:
        given = {**_preset(spec, given.pop(PRESET)), **given}
    weights = given.pop(WEIGHTS, None)
    allowed = [p.name for p in spec.params]
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise UserError(
            f"unknown parameter {', '.join(unknown)} for {name}; allowed: {', '.join(allowed)}"
        )
    resolved = {p.name: p.parse(given.get(p.name, p.default), name) for p in spec.params}
    workload = spec.build(**resolved)
    if weights is not None:
        workload = _with_weights(workload, weights)
    for shape, _dtype in workload.args:
        if math.prod(shape) > MAX_BUFFER_ELEMENTS:
            raise UserError(
                f"{name} with these parameters has a buffer of shape {shape}, "
                f"over {MAX_BUFFER_ELEMENTS} elements"
            )
    return workload


def _with_weights(workload: Workload, weights: object) -> Workload:
    """``workload`` with the inputs named in ``weights`` marked as layout-free buffers."""
    names = [param.name for param in workload.func.params]
    inputs = names[: len(names) - (workload.num_outputs or 0)]
    chosen = [word.strip() for word in str(weights).split(",") if word.strip()]
    unknown = [word for word in chosen if word not in inputs]
    if not chosen or unknown:
        raise UserError(
            f"parameter {WEIGHTS} of {workload.name} names inputs among {', '.join(inputs)}; "
            f"got {weights!r}"
        )
    indices = sorted({inputs.index(word) for word in chosen})
    return replace(
        workload,
        func=workload.func.with_attr("layout_free_buffers", indices),
        params={**workload.params, WEIGHTS: ",".join(inputs[i] for i in indices)},
    )


def _preset(spec: WorkloadSpec, preset: object) -> dict[str, object]:
    if preset not in spec.presets:
        known = ", ".join(spec.presets) or "none"
        raise UserError(f"unknown preset {preset!r} of {spec.name}; presets: {known}")
    return dict(spec.presets[str(preset)])


def parse_param_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """Turn ``KEY=VALUE`` strings (from ``-p``) into a dict; values stay strings.

    Raises:
        UserError: a pair without ``=``, with an empty key, or a key given twice.
    """
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"parameter override {pair!r} is not of the form KEY=VALUE")
        if key in overrides:
            raise UserError(f"parameter {key} is given twice")
        overrides[key] = value.strip()
    return overrides
