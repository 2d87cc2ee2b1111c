"""What the machine is: its CPU model and frequency governor, where the system tells
them without privileges (None where it does not: no cpufreq in many VMs)."""

from __future__ import annotations

import platform
import subprocess
import sys

from ._files import ROOT, read_text, under


def cpu_model(root: str = ROOT) -> str | None:
    """The CPU's model name: ``/proc/cpuinfo``'s, else (this machine only) sysctl's on
    macOS or ``platform.processor()``."""
    for line in (read_text(under(root, "proc/cpuinfo")) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    if root != ROOT:
        return None
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() or None
    return platform.processor() or None


def cpu_governor(root: str = ROOT) -> str | None:
    """cpufreq's governor of CPU 0 ("performance", "powersave", ...)."""
    text = read_text(under(root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"))
    return (text or "").strip() or None
