"""Provenance of a benchmark run, shared by the bench scripts: the checkout's
git revision and the machine."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git_revision(repo: Path = REPO) -> str:
    """``HEAD`` of ``repo``, marked when tracked files have uncommitted
    changes; ``"unknown"`` without git."""
    try:
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
        return (rev or "unknown") + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def machine_info() -> dict:
    """Node, platform, CPU model, core count and total memory."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return {"node": platform.node(), "platform": platform.platform(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "memory": mem}
