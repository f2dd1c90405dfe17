"""Facts about the machine: the processor's name, which keys its calibration."""
from __future__ import annotations

import platform
from pathlib import Path

import torch


def processor_name(device: str = "cpu") -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    try:
        name = cpu_name(Path("/proc/cpuinfo").read_text())
    except OSError:
        name = None
    return name or platform.processor() or platform.machine()


def cpu_name(cpuinfo: str) -> str | None:
    """The first processor's model name from /proc/cpuinfo, with its family and model: cloud CPUs often say only
    "AMD EPYC", and a Zen 3 (AVX2 only) and a Zen 4 (AVX-512) must not share a calibration."""
    fields = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor only
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    if "model name" not in fields:
        return None
    if "cpu family" in fields and "model" in fields:
        return f"{fields['model name']} (family {fields['cpu family']} model {fields['model']})"
    return fields["model name"]
