"""PyTorch models into Relax with their dtypes kept: ``from_torch(model, example_inputs)``.

TVM 0.27's importer (``from_exported_program``) emits every conv2d, linear and matmul with
``out_dtype="float32"``, whatever its inputs are.  For an fp32 model that is a no-op; for an
fp16 model the next op fails to import (a conv's fp16 bias added to its fp32 output, a batch
norm's fp16 statistics on fp32 data: "Binary operators must have the same datatype").  The
importer below emits those ops as PyTorch computes them: fp32 accumulation, then the output cast
to the inputs' dtype (``astype``), so the rest of the graph keeps the model's dtype and
``partition`` sees ``conv2d -> astype(float16) -> ...``, which it fuses into one kernel with an
fp16 output.  torch is imported here only, inside functions: it is optional for the package.
"""

from __future__ import annotations

from tvm import relax


def _cast_back(importer, out: relax.Expr, like: relax.Expr) -> relax.Expr:
    """``out`` (fp32 accumulation) cast to ``like``'s dtype where that is not fp32."""
    dtype = like.ty.dtype.dtype if hasattr(like.ty.dtype, "dtype") else str(like.ty.dtype)
    out = importer.block_builder.emit(out)
    return out if str(dtype) == "float32" else importer.block_builder.emit(relax.op.astype(out, dtype))


def _importer_type():
    """The importer class, made when first asked for (it subclasses a class of TVM's torch
    frontend, which imports torch)."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    class DtypeKeepingImporter(ExportedProgramImporter):
        def _conv2d_impl(self, x, weight, bias, strides, padding, dilation, groups):
            out = _cast_back(self, relax.op.nn.conv2d(x, weight, strides=strides, padding=padding, dilation=dilation,
                                                      groups=groups, data_layout="NCHW", kernel_layout="OIHW",
                                                      out_dtype="float32"), x)
            if self._is_no_bias(bias):
                return out
            return self.block_builder.emit(relax.op.add(out, relax.op.reshape(bias, (1, -1, 1, 1))))

        def _linear(self, node):
            x, weight, *rest = self.retrieve_args(node)
            out = _cast_back(self, relax.op.matmul(x, relax.op.permute_dims(weight), out_dtype="float32"), x)
            bias = rest[0] if rest else None
            return out if bias is None else self.block_builder.emit(relax.op.add(out, bias))

        def _addmm(self, node):
            bias, x, y = (self.env[a] for a in node.args[:3])
            alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
            if alpha != 1 or beta != 1:
                return super()._addmm(node)  # rare; fp32 models only
            out = _cast_back(self, relax.op.matmul(x, y, out_dtype="float32"), x)
            return self.block_builder.emit(relax.op.add(out, bias))

        def create_convert_map(self):
            convert = super().create_convert_map()
            for name in ("matmul.default", "mm.default"):
                convert[name] = self._matmul_keeping_dtype
            return convert

        def _matmul_keeping_dtype(self, node):
            x, y = (self.env[a] for a in node.args[:2])
            return _cast_back(self, relax.op.matmul(x, y, out_dtype="float32"), x)

    return DtypeKeepingImporter


def from_torch(model, example_inputs) -> "relax.IRModule":
    """``model`` (an eval-mode ``torch.nn.Module``) on ``example_inputs`` as a Relax IRModule:
    exported with ``torch.export``, decomposed, imported with the model's dtypes kept (see the
    module) and its parameters bound as constants (what ``partition`` folds into the kernels'
    layouts)."""
    import torch

    if model.training:
        raise ValueError("the model is in training mode: call model.eval() first (batch norms fold with their "
                         "running statistics)")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    inputs = tuple(x.contiguous() for x in inputs)  # export records strides; Relax tensors are row-major
    with torch.no_grad():
        program = torch.export.export(model, inputs).run_decompositions()
    return _importer_type()().from_exported_program(program, keep_params_as_input=False,
                                                    unwrap_unit_return_tuple=True, no_bind_return_tuple=False,
                                                    custom_convert_map=None)
