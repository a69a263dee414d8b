"""What a built module tells TVM's CUDA runtime about each kernel's launch: its launch tags,
read back from the module's serialised form (as ``export_library`` writes it, without a host
compiler), where ``tirx.use_programtic_dependent_launch`` makes the runtime launch it with PDL."""

import re
import struct

import tvm

# a string as dmlc streams write it (u64 length, bytes), the same again: a function table's key
# and its FunctionInfo's name
_NAMED = re.compile(rb"([\x01-\xff]\x00{7})([A-Za-z_][A-Za-z0-9_]*)\1\2")


def _strings(blob: bytes, at: int) -> tuple[list[str], int]:
    (count,) = struct.unpack_from("<Q", blob, at)
    at += 8
    out = []
    for _ in range(count):
        (size,) = struct.unpack_from("<Q", blob, at)
        out.append(blob[at + 8:at + 8 + size].decode())
        at += 8 + size
    return out, at


def launch_tags(module) -> dict[str, list[str]]:
    """{kernel name: launch tags} of every device kernel of ``module`` (a runtime module)."""
    blob = tvm.get_global_func("runtime.ModulePackImportsToTensor")(module).numpy().tobytes()
    found = {}
    for match in _NAMED.finditer(blob):
        name = match.group(2).decode()
        if struct.unpack("<Q", match.group(1))[0] != len(name):
            continue
        at = match.end()
        (arg_types,) = struct.unpack_from("<Q", blob, at)
        found[name], _ = _strings(blob, at + 8 + 4 * arg_types)  # DLDataType: 4 bytes each
    return found
