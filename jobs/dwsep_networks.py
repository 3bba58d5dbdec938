"""Fused depthwise-separable convolution problem sets taken from real networks.

Writes every depthwise -> pointwise pair of six ImageNet classifiers that `dwsep_fwd` can
compute as one operator, as problem-set CSVs in jobs/networks/dwsep/:

    <net>_n<N>.csv    for each network with at least one such pair and each batch size N in
                      BATCH_SIZES; columns N,C,H,W,K,R,S,stride,pad,multiplier,activation,
                      pw_bias,layer
    all_dwsep.csv     every network at every batch size, with a `network` column

A pair is a depthwise convolution (groups = C, `multiplier` outputs per input channel: M*C
channels) followed by a 1x1 convolution to K channels, where only a per-channel affine (a
BatchNorm, folded into a scale and a shift) and an activation stand between the two. One row
per pair, in forward order: a shape used by k pairs appears k times (no `count` column).
H x W is the depthwise's input, R x S its filter, `pad` its (symmetric) padding, `stride` its
stride; `activation` is what the network applies between the stages (none, relu, relu6, silu,
hardswish); `pw_bias` is 1 where the pointwise is followed by a BatchNorm (folded into a bias)
or has a bias of its own. `layer` names the depthwise and pointwise modules in the reference
implementation ("dw+pw"), or the one layer that holds both (Keras' SeparableConv2D).

What stands outside the operator: a BatchNorm after the pointwise becomes its bias, but an
activation after it (MobileNetV1's ReLU6, Xception's ReLU after some separable convolutions) is
the next operation's business, and so is anything before the depthwise.

Networks (multiplier 1 in every one: none of their published ImageNet models uses 2):
  mobilenet_v1        MobileNetV1 1.0 at 224 (Howard et al. 2017, Table 1; Keras Applications'
                      MobileNet, whose layer names are used): 13 depthwise-separable blocks,
                      depthwise 3x3, BatchNorm, ReLU6, pointwise, BatchNorm, ReLU6. Kept 13,
                      left out 0. The paper's text says ReLU; the released models (TF-slim,
                      Keras) use ReLU6. Keras pads a stride-2 depthwise by one row and column at
                      the bottom and right only; padding 1 on every side gives the same output
                      size and is what is recorded. The paper's table lists the last depthwise
                      with stride 2 on a 7x7 map; every implementation uses stride 1, as here.
  mobilenet_v2        torchvision mobilenet_v2 (1.0): 17 inverted residuals, depthwise 3x3,
                      BatchNorm, ReLU6, linear projection with BatchNorm. Kept 17, left out 0.
  mobilenet_v3_large  torchvision mobilenet_v3_large: 15 inverted residuals. Kept 7, those
                      without squeeze-excitation (features.1-3: ReLU; features.7-10:
                      hardswish), left out 8: those with a squeeze-excitation block between
                      the depthwise and the projection (features.4-6, 11-15: the SE's channel
                      scales depend on the depthwise's whole output map, so the projection
                      cannot start before the depthwise ends).
  efficientnet_b0     torchvision efficientnet_b0: 16 MBConv blocks, every one with a
                      squeeze-excitation block between the depthwise and the projection
                      (features.1.0 to features.7.0). Kept 0, left out 16; no CSV files.
  mnasnet1_0          torchvision mnasnet1_0: the depthwise-separable block after the stem
                      (layers.3 -> layers.6) and 16 inverted residuals, all with BatchNorm and
                      ReLU between the depthwise and the projection and no squeeze-excitation.
                      Kept 17, left out 0.
  xception            Xception at 299x299 (Chollet 2017, Figure 5; Keras Applications' Xception,
                      whose layer names are used): 34 separable convolutions (entry flow 6,
                      middle flow 8 x 3, exit flow 4), each a depthwise 3x3 straight into a
                      pointwise with no BatchNorm or activation between them (the paper finds
                      that none works best): activation none with an identity affine. Kept 34,
                      left out 0. Xception's ReLUs sit before a separable convolution, on
                      the depthwise's input, never between its stages. Where the input comes
                      straight from a convolution (block2_sepconv1 from block1_conv2, every
                      blockN_sepconv2 and 3 from the separable convolution before it), that
                      ReLU is the earlier convolution's output activation; at the start of
                      blocks 3 to 13 (blockN_sepconv1, 11 pairs) it acts on a block input whose
                      un-activated value also feeds the shortcut, so it stays a step of its own
                      before the operator. block14_sepconv1 reads the last residual sum with no
                      ReLU.

The layer lists are written out here from those definitions (no torch, tensorflow or keras
import). tests/test_dwsep_networks.py checks the pair counts, rebuilds MobileNetV1's and
MnasNet's mult-adds and parameters and Xception's parameters from the pairs against the
published figures, and matches the torchvision pairs against the convolution layers of
jobs/networks.py.

Regenerate with:  python jobs/dwsep_networks.py   (stdlib only; tests/test_dwsep_networks.py
checks that the files on disk match what this script generates).
"""

import csv
import io
from dataclasses import dataclass
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "networks" / "dwsep"
BATCH_SIZES = (1, 8, 32)
IMAGE = 224
XCEPTION_IMAGE = 299
ACTIVATIONS = ("none", "relu", "relu6", "silu", "hardswish")  # kernels/dwsep/problem.py's
SHAPE_COLUMNS = ("N", "C", "H", "W", "K", "R", "S", "stride", "pad", "multiplier", "activation",
                 "pw_bias")
COLUMNS = SHAPE_COLUMNS + ("layer",)
ALL_COLUMNS = SHAPE_COLUMNS + ("network", "layer")
ALL_FILE = "all_dwsep.csv"


@dataclass(frozen=True)
class Pair:
    """A depthwise convolution of a single image (C x H x W in, M*C channels out, R x S filter)
    and the 1x1 convolution to K channels after it. `activation` is what the network applies
    to the depthwise's output; `se`: a squeeze-excitation block stands between the two."""

    layer: str
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int
    pad: int
    multiplier: int = 1
    activation: str = "none"
    pw_bias: int = 1
    se: bool = False

    @property
    def P(self) -> int:
        return (self.H + 2 * self.pad - self.R) // self.stride + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.pad - self.S) // self.stride + 1

    @property
    def mid(self) -> int:
        """Channels of the depthwise's output, the pointwise's input."""
        return self.multiplier * self.C

    def dw_macs(self, n: int = 1) -> int:
        return n * self.P * self.Q * self.mid * self.R * self.S

    def pw_macs(self, n: int = 1) -> int:
        return n * self.P * self.Q * self.mid * self.K

    def left_out_because(self) -> str | None:
        """Why the operator cannot compute this pair, or None."""
        if self.se:
            return "squeeze-excitation between the depthwise and the pointwise"
        if self.activation not in ACTIVATIONS:
            return f"{self.activation} between the stages is not one of the operator's activations"
        return None


def pair(pairs: list[Pair], layer: str, c: int, k: int, hw: int, ksize: int = 3, stride: int = 1,
         activation: str = "none", se: bool = False) -> int:
    """Append a square depthwise (padding (ksize-1)//2) on an hw x hw map and its pointwise to
    k channels; returns the output size."""
    p = Pair(layer, c, hw, hw, k, ksize, ksize, stride, (ksize - 1) // 2,
             activation=activation, se=se)
    pairs.append(p)
    return p.P


def conv_out(hw: int, ksize: int, stride: int, pad: int) -> int:
    return (hw + 2 * pad - ksize) // stride + 1


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision.models._utils._make_divisible."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


# MobileNetV1 ----------------------------------------------------------------------------------

def mobilenet_v1() -> list[Pair]:
    """Keras MobileNet (alpha 1.0, depth_multiplier 1): stem 3x3/2 conv to 32 channels, then
    blocks of (pointwise filters, depthwise stride)."""
    pairs: list[Pair] = []
    hw, c = conv_out(IMAGE, 3, 2, 1), 32  # conv1: 112
    blocks = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
              (1024, 2), (1024, 1))
    for i, (k, stride) in enumerate(blocks, start=1):
        hw = pair(pairs, f"conv_dw_{i}+conv_pw_{i}", c, k, hw, 3, stride, "relu6")
        c = k
    return pairs


# MobileNetV2 / V3, EfficientNet-B0 (torchvision) ----------------------------------------------

def inverted_residual(pairs: list[Pair], name: str, c_in: int, c_exp: int, c_out: int, hw: int,
                      ksize: int, stride: int, activation: str, se: bool = False,
                      bare_project: bool = False) -> int:
    """torchvision InvertedResidual / MBConv: [1x1 expand], depthwise, [SE], 1x1 project; module
    names follow its Sequential indices (bare_project: the projection is a plain Conv2d, as in
    MobileNetV2, not wrapped in a Conv2dNormActivation)."""
    dw = 0 if c_exp == c_in else 1
    project = dw + (2 if se else 1)
    layer = f"{name}.{dw}.0+{name}.{project}" + ("" if bare_project else ".0")
    return pair(pairs, layer, c_exp, c_out, hw, ksize, stride, activation, se)


def mobilenet_v2() -> list[Pair]:
    """torchvision mobilenet_v2, width 1.0: rows of (expansion t, channels c, repeats n,
    stride s)."""
    pairs: list[Pair] = []
    hw, c_in, i = conv_out(IMAGE, 3, 2, 1), 32, 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for j in range(n):
            hw = inverted_residual(pairs, f"features.{i}.conv", c_in, c_in * t, c, hw, 3,
                                   s if j == 0 else 1, "relu6", bare_project=True)
            c_in, i = c, i + 1
    return pairs


def mobilenet_v3_large() -> list[Pair]:
    """torchvision mobilenet_v3_large: rows of (kernel, expanded, out, SE, activation, stride);
    "HS" is hardswish."""
    pairs: list[Pair] = []
    hw, c_in = conv_out(IMAGE, 3, 2, 1), 16
    rows = ((3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2),
            (3, 72, 24, False, "RE", 1), (5, 72, 40, True, "RE", 2),
            (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
            (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1),
            (3, 184, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
            (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
            (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1),
            (5, 960, 160, True, "HS", 1))
    for i, (k, exp, out, se, act, s) in enumerate(rows, start=1):
        activation = "relu" if act == "RE" else "hardswish"
        hw = inverted_residual(pairs, f"features.{i}.block", c_in, exp, out, hw, k, s,
                               activation, se)
        c_in = out
    return pairs


def efficientnet_b0() -> list[Pair]:
    """torchvision efficientnet_b0: stages of (expand, kernel, stride, in, out, repeats); SiLU
    and a squeeze-excitation block in every MBConv."""
    pairs: list[Pair] = []
    hw = conv_out(IMAGE, 3, 2, 1)
    stages = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
              (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
              (6, 3, 1, 192, 320, 1))
    for i, (t, k, s, c_in, c_out, n) in enumerate(stages, start=1):
        for j in range(n):
            c = c_in if j == 0 else c_out
            hw = inverted_residual(pairs, f"features.{i}.{j}.block", c, c * t, c_out, hw, k,
                                   s if j == 0 else 1, "silu", se=True)
    return pairs


# MnasNet (torchvision) ------------------------------------------------------------------------

def mnasnet1_0() -> list[Pair]:
    """torchvision mnasnet1_0 (depths 32, 16, 24, 40, 80, 96, 192, 320): stem conv 3x3/2 to 32
    (layers.0), the depthwise-separable block layers.3 -> layers.6 to 16, then stacks
    layers.8-13 of _InvertedResidual (.layers: 0 expand, 3 depthwise, 6 projection), rows of
    (out, kernel, stride, expansion, repeats)."""
    pairs: list[Pair] = []
    hw = conv_out(IMAGE, 3, 2, 1)
    pair(pairs, "layers.3+layers.6", 32, 16, hw, 3, 1, "relu")
    c_in = 16
    stacks = ((24, 3, 2, 3, 3), (40, 5, 2, 3, 3), (80, 5, 2, 6, 3), (96, 3, 1, 6, 2),
              (192, 5, 2, 6, 4), (320, 3, 1, 6, 1))
    for i, (out, k, s, t, n) in enumerate(stacks, start=8):
        for j in range(n):
            name = f"layers.{i}.{j}.layers"
            hw = pair(pairs, f"{name}.3+{name}.6", c_in * t, out, hw, k, s if j == 0 else 1,
                      "relu")
            c_in = out
    return pairs


# Xception (Keras) -----------------------------------------------------------------------------

def xception() -> list[Pair]:
    """Keras Xception at 299x299: block1 (conv 3x3/2 valid to 32, conv 3x3 valid to 64), entry
    blocks 2-4 (two separable convs, then a 3x3/2 max pool, padding same), middle blocks 5-12
    (three separable convs at 728), exit block 13 (728, 1024, max pool) and block 14 (1536,
    2048). Every separable conv: depthwise 3x3 padding same, then pointwise, no bias, BatchNorm
    after."""
    pairs: list[Pair] = []
    hw = conv_out(conv_out(XCEPTION_IMAGE, 3, 2, 0), 3, 1, 0)  # 149, then 147
    c = 64
    blocks = [(2, (128, 128), True), (3, (256, 256), True), (4, (728, 728), True),
              *[(b, (728, 728, 728), False) for b in range(5, 13)],
              (13, (728, 1024), True), (14, (1536, 2048), False)]
    for block, widths, pool in blocks:
        for i, k in enumerate(widths, start=1):
            pair(pairs, f"block{block}_sepconv{i}", c, k, hw)
            c = k
        if pool:
            hw = conv_out(hw, 3, 2, 1)  # ceil(hw / 2), as padding "same" gives
    return pairs


NETWORKS = {
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_large": mobilenet_v3_large,
    "efficientnet_b0": efficientnet_b0,
    "mnasnet1_0": mnasnet1_0,
    "xception": xception,
}


def fused(network: str) -> list[Pair]:
    """The network's pairs the operator computes, in forward order."""
    return [p for p in NETWORKS[network]() if p.left_out_because() is None]


def left_out(network: str) -> list[tuple[Pair, str]]:
    """The network's other depthwise -> pointwise pairs, each with the reason."""
    return [(p, why) for p in NETWORKS[network]() if (why := p.left_out_because()) is not None]


# Output ---------------------------------------------------------------------------------------

def rows(network: str, n: int) -> list[tuple]:
    return [(n, p.C, p.H, p.W, p.K, p.R, p.S, p.stride, p.pad, p.multiplier, p.activation,
             p.pw_bias, p.layer) for p in fused(network)]


def csv_text(columns: tuple[str, ...], table: list[tuple]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(table)
    return buf.getvalue()


def generate() -> dict[str, str]:
    """File name -> CSV text, for every file this script writes (a network without a fused pair
    has no file of its own)."""
    files = {f"{net}_n{n}.csv": csv_text(COLUMNS, rows(net, n))
             for net in NETWORKS if fused(net) for n in BATCH_SIZES}
    files[ALL_FILE] = csv_text(ALL_COLUMNS, [(*row[:-1], net, row[-1]) for net in NETWORKS
                                             for n in BATCH_SIZES for row in rows(net, n)])
    return files


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (OUT_DIR / name).write_text(text)
    for net in NETWORKS:
        kept, dropped = fused(net), left_out(net)
        macs = sum(p.dw_macs() + p.pw_macs() for p in kept)
        print(f"{net:20s} {len(kept):3d} fused pairs ({macs / 1e6:8.2f} M MACs at N=1), "
              f"{len(dropped):3d} left out")
        for p, why in dropped:
            print(f"{'':24s}{p.layer}: {why}")
    print(f"wrote {len(generate())} files to {OUT_DIR}")


if __name__ == "__main__":
    main()
