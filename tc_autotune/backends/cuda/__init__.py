"""CUDA: the GPU's facts and limits, the toolkit (which nvcc, its release and flags), nvcc's
compiling and its cubin cache, the on-device output checker, physical peaks (what no honest
timing can beat) and TMA tensor maps.  It imports nothing of the package above it: the cache of
built kernels, which chooses and builds them, is ``api``'s."""
