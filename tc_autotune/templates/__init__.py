"""Kernel templates: each owns its knobs, validity rules, prior and code generation."""
