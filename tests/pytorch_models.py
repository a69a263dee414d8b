"""Small PyTorch models for the tests of ``tc_autotune.pytorch`` (CPU and GPU)."""

import torch
import torch.nn.functional as F
from torch import nn

from tc_autotune.pytorch.models import randomize_batch_norms


class Block(nn.Module):
    """A ResNet bottleneck with a projection shortcut (as torchvision writes it)."""

    def __init__(self, c_in, mid, c_out):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += self.downsample(x)
        return self.relu(out)


class SmallNet(nn.Module):
    """6 convs (a stem with its own bias and F.relu, a bottleneck, a strided 3x3), then an MLP
    head: Linear, tanh-GELU, Linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.block = Block(32, 16, 64)
        self.down, self.bn = nn.Conv2d(64, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64)
        self.fc1, self.act, self.fc2 = nn.Linear(64, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 10)
        randomize_batch_norms(self)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = self.block(x)
        x = torch.relu(self.bn(self.down(x)))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc2(self.act(self.fc1(x)))
