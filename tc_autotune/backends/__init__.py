"""Where kernels are compiled and run."""
