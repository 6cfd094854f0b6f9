"""What this machine's CPU can do in theory: its physical cores, vector FMA units and lanes, and its
clock, read from Linux's ``/proc/cpuinfo``, and the float32 peak they multiply to; and the
instruction-set flags the kernel reports it may use.

The roofline (``roofline.py``) reports this figure beside the measured peak, so a calibration far
below it shows at a glance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_CPUINFO = Path("/proc/cpuinfo")
_MAX_FREQ_KHZ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


@dataclass(frozen=True)
class CpuPeak:
    """The float32 rate of ``cores`` physical cores that each retire ``fma_units`` vector FMAs of
    ``lanes`` float32 lanes per cycle at ``clock_ghz`` (each FMA is two FLOPs)."""

    model: str
    cores: int
    fma_units: int
    lanes: int
    clock_ghz: float | None
    clock_source: str  # "max" (cpufreq's highest clock) or "nominal" (/proc/cpuinfo's, no turbo)

    @property
    def gflops(self) -> float | None:
        if self.clock_ghz is None:
            return None
        return self.cores * self.fma_units * self.lanes * 2 * self.clock_ghz

    def describe(self) -> str:
        """The product spelled out, e.g. ``2 cores x 2 FMA x 8 lanes x 2 x 2.45 GHz (nominal)``."""
        clock = "? GHz" if self.clock_ghz is None else f"{self.clock_ghz:.2f} GHz"
        return (
            f"{self.cores} cores x {self.fma_units} FMA x {self.lanes} lanes x 2 x {clock} "
            f"({self.clock_source})"
        )


def cpu_peak(cores: int | None = None, cpuinfo: str | None = None) -> CpuPeak | None:
    """The theoretical peak of this x86 CPU (on ``cores`` of its cores, default all physical ones);
    None where ``/proc/cpuinfo`` does not describe an x86 CPU we know the FMA units of."""
    processors = _processors(cpuinfo)
    if not processors:
        return None
    first = processors[0]
    flags = set(first.get("flags", "").split())
    shape = _fma_shape(first.get("vendor_id", ""), _int(first.get("cpu family")), flags)
    if shape is None:
        return None
    fma_units, lanes = shape
    physical = len({(p.get("physical id"), p.get("core id")) for p in processors})
    clock_ghz, source = _clock_ghz(first)
    return CpuPeak(
        model=first.get("model name", "unknown"),
        cores=min(cores or physical, physical),
        fma_units=fma_units,
        lanes=lanes,
        clock_ghz=clock_ghz,
        clock_source=source,
    )


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str] | None:
    """The instruction-set flags of this machine's first CPU as Linux reports them (``avx2``,
    ``avx512_bf16``, ...): what programs may use here, which a hypervisor can make less than the
    CPU model has. None where ``/proc/cpuinfo`` lists no flags (not Linux, not x86)."""
    processors = _processors(cpuinfo)
    if not processors or "flags" not in processors[0]:
        return None
    return frozenset(processors[0]["flags"].split())


def _processors(cpuinfo: str | None) -> list[dict[str, str]]:
    """One dict per ``processor`` block of ``cpuinfo`` (default this machine's /proc/cpuinfo;
    none where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text()
        except OSError:
            return []
    blocks = []
    for block in cpuinfo.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if "processor" in fields:
            blocks.append(fields)
    return blocks


def _fma_shape(vendor: str, family: int | None, flags: set[str]) -> tuple[int, int] | None:
    """(vector FMAs retired per cycle, float32 lanes each) of one core.

    Intel cores since Haswell retire two FMAs a cycle at their widest width (a few AVX-512 Xeons
    have one 512-bit unit; they read as two here). AMD's Zen and Zen+ split a 256-bit FMA over
    two 128-bit pipes (one a cycle), Zen 2 and 3 have two 256-bit pipes, Zen 4 runs a 512-bit FMA
    as two halves (one a cycle), Zen 5 has two 512-bit pipes.
    """
    if "fma" not in flags:
        return None
    lanes = 16 if "avx512f" in flags else 8
    if vendor == "GenuineIntel":
        return 2, lanes
    if vendor != "AuthenticAMD" or family is None:
        return None
    if family == 0x17:  # Zen, Zen+, Zen 2: the model number tells them apart
        return (2, 8) if "clwb" in flags else (1, 8)
    if family == 0x19:  # Zen 3 (no AVX-512), Zen 4
        return (1, 16) if lanes == 16 else (2, 8)
    return 2, lanes  # Zen 5 and later


def _clock_ghz(processor: dict[str, str]) -> tuple[float | None, str]:
    try:
        return int(_MAX_FREQ_KHZ.read_text()) / 1e6, "max"
    except (OSError, ValueError):
        pass
    mhz = processor.get("cpu MHz")
    try:
        return (float(mhz) / 1e3, "nominal") if mhz else (None, "unknown")
    except ValueError:
        return None, "unknown"


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
