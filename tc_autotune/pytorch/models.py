"""Models to optimize and benchmark where torchvision is not installed.

``resnet50()`` is torchvision's ResNet-50 v1.5 (the stride on each bottleneck's 3x3, the
projection shortcut a 1x1 conv + batch norm, ``ReLU(inplace=True)`` shared within a block,
``out += identity``): the same modules, names and forward, so ``optimize`` sees what it sees in
torchvision's; ``resnext50_32x4d()`` is torchvision's ResNeXt-50 32x4d, the same network with
each bottleneck's 3x3 conv grouped (32 groups of 4-32 channels) and wider.  ``MLPBlock`` is a transformer's feed-forward block (Linear, tanh-GELU, Linear).
Weights are random (the batch norms' running statistics too, so folding them is exercised).
"""

from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 groups: int = 1, base_width: int = 64):
        super().__init__()
        width = planes * base_width // 64 * groups  # torchvision's: ResNeXt's grouped 3x3 is wider
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), num_classes: int = 1000, groups: int = 1, width_per_group: int = 64):
        super().__init__()
        self.inplanes, self.groups, self.base_width = 64, groups, width_per_group
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride,
                                                 bias=False), nn.BatchNorm2d(planes * Bottleneck.expansion))
        shape = {"groups": self.groups, "base_width": self.base_width}
        layers = [Bottleneck(self.inplanes, planes, stride, downsample, **shape)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes, **shape) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 1000, seed: int = 0) -> ResNet:
    """ResNet-50 v1.5 with random weights and batch norm statistics (eval mode, fp32, CPU)."""
    torch.manual_seed(seed)
    model = ResNet(num_classes=num_classes)
    randomize_batch_norms(model)
    return model.eval()


def resnext50_32x4d(num_classes: int = 1000, seed: int = 0) -> ResNet:
    """ResNeXt-50 32x4d (torchvision's) with random weights and batch norm statistics."""
    torch.manual_seed(seed)
    model = ResNet(num_classes=num_classes, groups=32, width_per_group=4)
    randomize_batch_norms(model)
    return model.eval()


def randomize_batch_norms(model: nn.Module) -> None:
    """Running statistics and affine parameters away from (0, 1), so that folding them into
    the convs changes the weights (a fresh batch norm is nearly the identity)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.0)
                module.bias.uniform_(-0.1, 0.1)


class MLPBlock(nn.Module):
    """A transformer's feed-forward block: Linear(d, hidden), tanh-GELU, Linear(hidden, d)."""

    def __init__(self, d_model: int = 4096, hidden: int = 11008):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def mlp_block(d_model: int = 4096, hidden: int = 11008, seed: int = 0) -> MLPBlock:
    torch.manual_seed(seed)
    return MLPBlock(d_model, hidden).eval()
