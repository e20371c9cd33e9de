"""GPU telemetry of a load point (power, memory, utilisation, SM clock via NVML or nvidia-smi), its energy and tokens/J."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable


# nvidia-smi --help-query-gpu (driver 580): power.draw.instant is the board's instant draw; power.draw is, on Ampere
# and newer, an average over 1 s, which lags a 250 ms series (it stands in where a driver lacks .instant).
# utilization.gpu is the share of the last sample period (1/6 s to 1 s) in which any kernel ran: the nearest to SM
# utilisation nvidia-smi and NVML give (SM activity proper is DCGM's profiling field DCGM_FI_PROF_SM_ACTIVE).
SMI_FIELDS = ("power.draw.instant", "memory.used", "utilization.gpu", "clocks.sm")
SMI_FALLBACK_POWER = "power.draw"
KEYS = ("power_w", "memory_used_mib", "gpu_util_pct", "sm_clock_mhz")  # one per field, in SMI_FIELDS' order
ENERGY_KEY = "energy_mj"  # NVML's total energy counter (mJ since the driver loaded), where the GPU has one

Reading = dict  # key of KEYS (and ENERGY_KEY) -> value, None where the GPU does not report it


class TelemetryUnavailable(Exception):
    """No way to read this GPU from here (one line: why)."""


def parse_smi_row(line: str) -> Reading:
    """One row of `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`; [N/A] and [Not Supported] are
    None, never 0."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != len(KEYS):
        raise ValueError(f"nvidia-smi printed {line.strip()!r}, not {len(KEYS)} fields ({', '.join(SMI_FIELDS)})")
    return {key: _figure(field) for key, field in zip(KEYS, fields, strict=True)}


def _figure(field: str) -> float | None:
    try:
        return float(field)
    except ValueError:
        if field.startswith("["):  # [N/A], [Not Supported], [Unknown Error]
            return None
        raise ValueError(f"nvidia-smi printed {field!r} where a number belongs") from None


class SmiSource:
    """Reads GPU `index` by running nvidia-smi once per sample (about 30 ms on an H200 host)."""

    name = "nvidia-smi"

    def __init__(self, index: int, smi: str, run: Callable = subprocess.run):
        self.index, self.smi, self._run = index, smi, run
        self.fields = SMI_FIELDS
        if self._query(SMI_FIELDS[:1]).returncode != 0:  # an older driver: no power.draw.instant
            self.fields = (SMI_FALLBACK_POWER, *SMI_FIELDS[1:])
            self.name = f"nvidia-smi ({SMI_FALLBACK_POWER}: 1 s averages)"

    def _query(self, fields: tuple[str, ...]):
        argv = [self.smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", f"--id={self.index}"]
        return self._run(argv, capture_output=True, text=True, timeout=5)

    def __call__(self) -> Reading:
        out = self._query(self.fields)
        if out.returncode != 0:
            raise RuntimeError(f"nvidia-smi exited {out.returncode}: {(out.stdout + out.stderr).strip()[:200]}")
        return parse_smi_row(out.stdout.strip().splitlines()[0])


class NvmlSource:
    """Reads GPU `index` through NVML (the nvidia-ml-py package's pynvml), in-process: no process per sample, and the
    GPU's own energy counter where it has one (Volta and newer)."""

    # nvmlDeviceGetPowerUsage is a 1 s average on Ampere and newer, so the energy comes from the counter: on an H200
    # (driver 580, 2026-11-26) over 4 s of bf16 matmuls the counter gave 2707 J, nvidia-smi's power.draw.instant
    # sampled every 250 ms and integrated 2649 J, NVML's power integrated 2424 J (its ramp lags a second)

    name = "nvml"

    def __init__(self, index: int, nvml):
        nvml.nvmlInit()
        self.nvml, self.handle = nvml, nvml.nvmlDeviceGetHandleByIndex(index)
        self.energy = True
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except nvml.NVMLError:
            self.energy = False

    def __call__(self) -> Reading:
        nvml, handle = self.nvml, self.handle
        reading = {
            "power_w": self._maybe(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),  # mW
            "memory_used_mib": nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20,
            "gpu_util_pct": self._maybe(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            "sm_clock_mhz": self._maybe(lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
        }
        if self.energy:
            reading[ENERGY_KEY] = float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        return reading

    def _maybe(self, read: Callable[[], float]) -> float | None:
        try:
            return read()
        except self.nvml.NVMLError_NotSupported:
            return None

    def close(self) -> None:
        self.nvml.nvmlShutdown()


def _pynvml():
    try:
        import pynvml  # type: ignore[import-not-found]  # the optional nvidia-ml-py package
    except ImportError:
        return None
    return pynvml


def gpu_source(gpu: dict | None, reason: str | None = None):
    """The reader of `gpu` (the report's run.gpu: {index, name, ...}, None where no GPU serves): NVML where pynvml
    imports and starts, else nvidia-smi. TelemetryUnavailable says why there is none."""
    if gpu is None or gpu.get("index") is None:
        raise TelemetryUnavailable(reason or "no GPU serves (hardware: cpu)")
    nvml = _pynvml()
    if nvml is not None:
        try:
            return NvmlSource(gpu["index"], nvml)
        except Exception:  # noqa: BLE001 (NVML missing its library or driver: nvidia-smi may still answer)
            pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise TelemetryUnavailable(f"GPU {gpu['index']} ({gpu.get('name')}) serves, but neither pynvml nor nvidia-smi is here")
    return SmiSource(gpu["index"], smi)


def served_gpu(run: dict) -> tuple[dict | None, str]:
    """(the GPU of the report's run block, or None; why not): a remote server's GPU is not this host's."""
    if run.get("gpu"):
        return run["gpu"], ""
    hardware = run.get("hardware", "cpu")
    if hardware == "cpu":
        return None, "no GPU serves (hardware: cpu)"
    return None, f"no GPU of this host serves (hardware: {hardware})"


def integral(times: list[float], values: list[float | None], start: float, end: float) -> float | None:
    """The integral over [start, end] of the piecewise-linear curve through (times, values) (trapezoids, the curve
    cut at start and end); None unless the samples cover [start, end]."""
    points = [(t, v) for t, v in zip(times, values, strict=True) if v is not None]
    if len(points) < 2 or points[0][0] > start or points[-1][0] < end or end < start:
        return None
    total = 0.0
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        a, b = max(t0, start), min(t1, end)
        if b <= a:
            continue
        va, vb = _at(t0, v0, t1, v1, a), _at(t0, v0, t1, v1, b)
        total += (va + vb) / 2 * (b - a)
    return total


def value_at(times: list[float], values: list[float | None], when: float) -> float | None:
    """The piecewise-linear curve through (times, values) at `when`; None outside the samples."""
    points = [(t, v) for t, v in zip(times, values, strict=True) if v is not None]
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t0 <= when <= t1:
            return _at(t0, v0, t1, v1, when)
    return None


def _at(t0: float, v0: float, t1: float, v1: float, when: float) -> float:
    return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)


def energy_j(times: list[float], readings: list[Reading], start: float, end: float) -> tuple[float | None, str]:
    """(joules the GPU drew over [start, end], how it was measured): NVML's energy counter where every reading has
    it, else the power samples integrated."""
    counter = [r.get(ENERGY_KEY) for r in readings]
    if counter and all(c is not None for c in counter):
        first, last = value_at(times, counter, start), value_at(times, counter, end)
        if first is not None and last is not None:
            return (last - first) / 1000.0, "NVML total energy counter"
    joules = integral(times, [r.get("power_w") for r in readings], start, end)
    return joules, "power samples integrated (trapezoids)"


def gpu_summary(times: list[float], readings: list[Reading], start: float, end: float, output_tokens: int) -> dict:
    """The report's figures of one load point: mean and max per reading over the samples within [start, end], the
    energy over [start, end] (samples just outside it bound the curve) and output tokens per joule."""
    inside = [r for t, r in zip(times, readings, strict=True) if start <= t <= end]
    summary: dict = {"samples": len(inside)}
    for key in KEYS:
        values = [r[key] for r in inside if r.get(key) is not None]
        summary[key] = {"mean": round(sum(values) / len(values), 2), "max": round(max(values), 2)} if values else None
    joules, method = energy_j(times, readings, start, end)
    summary.update(energy_j=None if joules is None else round(joules, 3), energy_method=method)
    summary["tokens_per_joule"] = round(output_tokens / joules, 4) if joules else None
    if joules is None:
        summary["energy_missing"] = "the power samples do not cover the load point"
    return summary
