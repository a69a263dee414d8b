"""The package's version: its own module, so that modules which stamp it (records) need not import
the package face, which wires the whole package together."""

__version__ = "0.1.0"
