"""Which devices a run measures on: local GPUs by index (``--devices 0,1``) or remote GPUs
through TVM's RPC tracker (``--rpc-tracker HOST:PORT --rpc-key KEY``), and the label each
record carries to name the one that measured it.

Local GPUs are listed with ``nvidia-smi`` (index, model, UUID; its indices are PCI bus order,
which is the order runner processes see with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).  One run tunes
for one GPU model: a GPU of another model is another target with its own history, so mixing
models in ``--devices`` is refused.  No TVM here.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalDevice:
    """One local GPU: ``index`` as nvidia-smi numbers it, its model and UUID (None if unknown)."""

    index: int
    name: str | None = None
    uuid: str | None = None

    @property
    def label(self) -> str:
        """'cuda:1 GPU-8f3c...' (what records name as the device)."""
        return f"cuda:{self.index}" + (f" {self.uuid}" if self.uuid else "")

    def environment(self) -> dict:
        """The environment of the runner process that owns this GPU (it sees only this one)."""
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": self.uuid or str(self.index)}


@dataclass(frozen=True)
class RpcDevice:
    """A remote GPU behind TVM's RPC tracker: any free server registered under ``key``."""

    host: str
    port: int
    key: str

    @property
    def label(self) -> str:
        return f"rpc:{self.key}@{self.host}:{self.port}"


def parse_indices(text: str) -> tuple[int, ...]:
    """'0,1,3' -> (0, 1, 3); ValueError on anything else, repeats included."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r}: expected GPU indices such as 0 or 0,1")
    indices = tuple(int(p) for p in parts)
    if len(set(indices)) != len(indices):
        raise ValueError(f"{text!r}: a GPU is listed twice")
    return indices


def parse_tracker(text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ValueError otherwise."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: expected HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


SMI_TIMEOUT = 60.0  # seconds nvidia-smi may take (a wedged driver can hang it)


def local_devices() -> list[LocalDevice]:
    """Every local GPU nvidia-smi lists (empty without nvidia-smi or a driver, or when it fails
    or hangs)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, errors="replace", timeout=SMI_TIMEOUT)
        # errors="replace": a corrupt or non-UTF-8 line is skipped below, not a crash of the run
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return _visible(parse_smi(out.stdout))


def parse_smi(text: str) -> list[LocalDevice]:
    """The GPUs of ``nvidia-smi --query-gpu=index,name,uuid --format=csv,noheader`` output.  Lines
    that are not "index, name, uuid" (a header, a warning, a driver message) are skipped; a field
    nvidia-smi could not read ("[N/A]", "[Unknown Error]") is None, and so is a UUID that is not
    one ("GPU-..." or "MIG-..."): CUDA_VISIBLE_DEVICES then names the GPU by index, never by junk."""
    found = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3 or not fields[0].isdigit():
            if line.strip():
                log.debug("nvidia-smi: skipping %r", line)
            continue
        index, name, uuid = int(fields[0]), _known(fields[1]), _known(fields[2])
        if uuid is not None and not uuid.startswith(("GPU-", "MIG-")):
            uuid = None
        found.append(LocalDevice(index, name, uuid))
    return found


def _known(field: str) -> str | None:
    """A field's value, or None for an empty one or nvidia-smi's "[N/A]", "[Unknown Error]", ..."""
    return None if not field or (field.startswith("[") and field.endswith("]")) else field


def _visible(found: list[LocalDevice]) -> list[LocalDevice]:
    """Those of ``found`` that CUDA_VISIBLE_DEVICES (indices or UUIDs) lets this process use."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    allowed = [v.strip() for v in visible.split(",") if v.strip()]
    return [d for d in found if str(d.index) in allowed or (d.uuid and d.uuid in allowed)]


def choose_local(requested: tuple[int, ...] | None, model: str | None,
                 available: list[LocalDevice]) -> list[LocalDevice]:
    """The GPUs to measure on: ``requested`` indices (each must exist, all of one model), else
    every available GPU of ``model`` (the local GPU 0's).  Without nvidia-smi's list, the
    requested indices are taken as they are (default: GPU 0).  ValueError says what is wrong."""
    if not available:
        return [LocalDevice(i, model) for i in (requested or (0,))]
    by_index = {d.index: d for d in available}
    if requested is None:
        chosen = [d for d in available if model is None or d.name == model] or available[:1]
    else:
        missing = [i for i in requested if i not in by_index]
        if missing:
            raise ValueError(f"no GPU {', '.join(map(str, missing))} here (GPUs: "
                             f"{', '.join(f'{d.index} {d.name}' for d in available)})")
        chosen = [by_index[i] for i in requested]
    models = sorted({d.name for d in chosen})
    if len(models) > 1:
        raise ValueError(f"GPUs of different models ({', '.join(models)}): each model is its own target "
                         "with its own history; run one tune per model")
    return chosen
