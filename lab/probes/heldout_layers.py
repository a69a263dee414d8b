"""The held-out convs (lab/heldout.toml, chosen in issue #11, in no log that trains anything) as
single-layer fp16 PyTorch models (conv + bias + ReLU, channels-last), each through
``optimize(measure="untuned")``: the zero-shot kernel against PyTorch's own layer (cuDNN), and which
side the guard keeps.

    python lab/probes/heldout_layers.py
"""

import tomllib
from pathlib import Path

import torch
from torch import nn

from tc_autotune.pytorch import optimize
from tc_autotune import workloads

HELDOUT = Path(__file__).resolve().parents[1] / "heldout.toml"


class ConvReLU(nn.Module):
    def __init__(self, wl):
        super().__init__()
        top, left, bottom, right = wl.padding
        assert (top, left) == (bottom, right), wl
        self.conv = nn.Conv2d(wl.in_channels, wl.out_channels, (wl.kernel_h, wl.kernel_w), wl.stride, (top, left))

    def forward(self, x):
        return torch.relu(self.conv(x))


def main() -> None:
    specs = [entry["name"] for entry in tomllib.loads(HELDOUT.read_text())["workloads"]]
    print("| held-out conv | fused us | PyTorch us | PyTorch / fused | kept | untuned |\n|---|---|---|---|---|---|")
    fused_sum = torch_sum = kept_sum = 0.0
    for spec in specs:
        wl = workloads.get(spec)
        torch.manual_seed(0)
        model = ConvReLU(wl).cuda().half().eval().to(memory_format=torch.channels_last)
        x = torch.randn(wl.batch, wl.in_channels, wl.in_height, wl.in_width, device="cuda").half()
        x = x.to(memory_format=torch.channels_last)
        with torch.no_grad():
            fast = optimize(model, (x,), measure="untuned")
        report = fast.tc_autotune_report
        ours, theirs = report.timed["conv"]
        kept = "PyTorch's" if "conv" in report.left else "fused"
        fused_sum, torch_sum = fused_sum + ours, torch_sum + theirs
        kept_sum += theirs if "conv" in report.left else ours
        print(f"| {spec} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | {theirs / ours:.2f} | {kept} | "
              f"{len(report.untuned)} |", flush=True)
    print(f"| **sum** | {fused_sum * 1e6:.1f} | {torch_sum * 1e6:.1f} | {torch_sum / fused_sum:.2f} | "
          f"kept: {kept_sum * 1e6:.1f} us ({torch_sum / kept_sum:.2f}x PyTorch's) | |")


if __name__ == "__main__":
    main()
