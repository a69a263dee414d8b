"""CUDA: the GPU's facts and limits, nvcc and the on-disk build cache, the on-device output
checker, physical peaks (what no honest timing can beat) and TMA tensor maps."""
