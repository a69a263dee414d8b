"""Workloads by name: a preset name or a spec string of either kind (``get``), and the preset that
names a workload, for tables people read (``preset_name``, ``display_name``).

It stands above both kinds, conv2d and dense, which know nothing of each other: what reads a
name the user wrote (the commands, job files, the builds of the API, the records' facade) imports
this module; what handles workloads already made (the records, the selection and the search, the
template's views) imports only the kinds it handles.
"""

from __future__ import annotations

from dataclasses import replace

from . import conv2d, dense
from .conv2d import Conv2dWorkload
from .dense import DenseWorkload
from .epilogue import NONE as NO_EPILOGUE
from .epilogue import is_name as is_epilogue


def preset(name: str) -> Conv2dWorkload | DenseWorkload:
    """A named workload: a conv2d preset (tutorial, rfc-{1x1,3x3}-b<N>, resnet50-<layer>-b<N>:
    ``conv2d.preset``) or a dense one (``dense.preset``); any of them with ``-<epilogue>`` appended
    (resnet50-res2-3x3-64-64-b32-bias_relu) is that workload with the epilogue fused."""
    base, dash, suffix = name.rpartition("-")
    if dash and suffix != NO_EPILOGUE and is_epilogue(suffix):
        return replace(preset(base), epilogue=suffix)
    found = dense.preset(name) or conv2d.preset(name)
    if found is None:
        raise ValueError(f"unknown workload preset {name!r} (try: {', '.join(conv2d.preset_names()[:4])}, ...)")
    return found


def preset_name(workload: Conv2dWorkload | DenseWorkload) -> str | None:
    """The preset that names ``workload`` ("rfc-3x3-b32"), or None: for tables people read."""
    if workload.epilogue != NO_EPILOGUE:
        base = preset_name(replace(workload, epilogue=NO_EPILOGUE))
        return base and f"{base}-{workload.epilogue}"
    if isinstance(workload, DenseWorkload):
        return dense.preset_name(workload)
    return conv2d.preset_name(workload)


def display_name(workload: Conv2dWorkload | DenseWorkload) -> str:
    """The preset name where there is one, else the spec string."""
    return preset_name(workload) or str(workload)


def get(name_or_spec) -> Conv2dWorkload | DenseWorkload:
    """A workload from a preset name, a spec string ("dense:..." for a dense one), or a
    workload (returned as is)."""
    if isinstance(name_or_spec, (Conv2dWorkload, DenseWorkload)):
        return name_or_spec
    if not isinstance(name_or_spec, str):
        raise ValueError(f"expected a preset name or a spec string, got {type(name_or_spec).__name__}")
    text = name_or_spec.strip()
    if text.startswith(dense.PREFIX):
        return DenseWorkload.parse(text)
    if "=" in text:
        return Conv2dWorkload.parse(text)
    return preset(text)


__all__ = ["preset", "preset_name", "display_name", "get"]
