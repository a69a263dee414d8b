"""Kernel templates: each owns its knobs, validity rules, prior and code generation
(``tc_gemm``); ``registry`` names them and the default one, which the package's top consults."""
