"""Built-in parameterised workloads, looked up by name.

Adding one is one ``@register_workload`` function in a module imported here.
"""

from autosched.workloads import (  # noqa: F401 (importing them registers their workloads)
    attention,
    image,
    linalg,
    nn,
    philox,
    quantized,
    ragged,
    winograd,
)
from autosched.workloads._registry import (
    Param,
    WorkloadSpec,
    get_workload,
    parse_param_overrides,
    register_workload,
    workload_specs,
)

__all__ = [
    "Param",
    "WorkloadSpec",
    "get_workload",
    "parse_param_overrides",
    "register_workload",
    "workload_specs",
]
