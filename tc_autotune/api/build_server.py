"""Imported first by the build workers' fork server (``build_cache``): there, and so in every
worker forked from it, ``import torch`` fails fast.  TVM imports torch where it can (for its Relax
interop), which made each worker pay for it (~1.7 s here, several seconds on a GPU host), and a
worker lowers and compiles kernels with no use for it.  The caller sets ``SERVER`` in the
environment only while the server starts, so importing this module anywhere else does nothing."""

import os
import sys

SERVER = "TC_AUTOTUNE_BUILD_SERVER"

if os.environ.get(SERVER) == "1":
    sys.modules.setdefault("torch", None)  # None in sys.modules: ``import torch`` raises ImportError
