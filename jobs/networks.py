"""Convolution problem sets taken from real CNNs.

Writes the 2D convolution layers of seven ImageNet classifiers, at 224x224 input, as
problem-set CSVs in jobs/networks/:

    <net>_n<N>.csv      for each network and batch size N in BATCH_SIZES
    all_networks.csv    every network at N=32, one after another (a shape shared by two
                        networks appears once for each)

Each layer shape appears once per file, in order of first appearance, with `layer` naming
the first layer of that shape (torchvision module path) and `count` the number of layers
of that shape. C and K count all channels (every group); G = C for depthwise.

The layer lists are written out here from the torchvision definitions (no torch import):
resnet50 (v1.5, stride on the 3x3), resnext50_32x4d, mobilenet_v2, mobilenet_v3_large,
efficientnet_b0, convnext_tiny and regnet_y_800mf. Included: every nn.Conv2d, the
squeeze-excitation 1x1 convs (on a 1x1 map) and ConvNeXt's pointwise nn.Linear layers as
1x1 convs over the HxW map. Excluded: the classifier heads (nn.Linear after pooling).

Regenerate with:  python jobs/networks.py   (stdlib only; tests/test_networks.py checks
that the files on disk match what this script generates).
"""

import csv
import io
import math
from dataclasses import astuple, dataclass
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "networks"
BATCH_SIZES = (1, 8, 32)
ALL_NETWORKS_BATCH = 32
IMAGE = 224
SHAPE_FIELDS = ("C", "K", "G", "H", "W", "R", "S",
                "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w")
COLUMNS = ("N",) + SHAPE_FIELDS + ("network", "layer", "count")


@dataclass(frozen=True)
class Shape:
    """One 2D convolution of a single image: NCHW input, KCRS weight, G groups."""

    C: int
    K: int
    G: int
    H: int
    W: int
    R: int
    S: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1

    @property
    def P(self) -> int:
        return (self.H + 2 * self.pad_h - self.dil_h * (self.R - 1) - 1) // self.stride_h + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.pad_w - self.dil_w * (self.S - 1) - 1) // self.stride_w + 1

    def macs(self, n: int = 1) -> int:
        return n * self.K * self.P * self.Q * (self.C // self.G) * self.R * self.S


@dataclass(frozen=True)
class ConvLayer:
    """A named conv layer of a network."""

    name: str
    shape: Shape


def conv(layers: list[ConvLayer], name: str, c: int, k: int, hw: int, ksize: int = 1,
         stride: int = 1, groups: int = 1, pad: int | None = None) -> int:
    """Append a square conv on an hw x hw map; pad defaults to (ksize-1)//2. Returns the output size."""
    pad = (ksize - 1) // 2 if pad is None else pad
    shape = Shape(c, k, groups, hw, hw, ksize, ksize, stride, stride, pad, pad)
    layers.append(ConvLayer(name, shape))
    return shape.P


def squeeze_excite(layers: list[ConvLayer], name: str, channels: int, squeeze: int) -> None:
    """SqueezeExcitation fc1/fc2: 1x1 convs on the globally pooled 1x1 map."""
    conv(layers, f"{name}.fc1", channels, squeeze, 1)
    conv(layers, f"{name}.fc2", squeeze, channels, 1)


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision.models._utils._make_divisible."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def inverted_residual(layers: list[ConvLayer], name: str, c_in: int, c_exp: int, c_out: int,
                      hw: int, ksize: int, stride: int, se: int | None = None,
                      bare_project: bool = False) -> int:
    """MobileNetV2/V3 InvertedResidual and EfficientNet MBConv: [1x1 expand], depthwise,
    [SE], 1x1 project. Names follow torchvision's Sequential indices; bare_project: the
    project conv is a plain Conv2d (MobileNetV2), not wrapped in a Conv2dNormActivation."""
    names = []
    if c_exp != c_in:
        names.append("expand")
    names += ["dw"] + (["se"] if se else []) + ["project"]
    idx = {part: i for i, part in enumerate(names)}
    if c_exp != c_in:
        conv(layers, f"{name}.{idx['expand']}.0", c_in, c_exp, hw)
    out = conv(layers, f"{name}.{idx['dw']}.0", c_exp, c_exp, hw, ksize, stride, groups=c_exp)
    if se:
        squeeze_excite(layers, f"{name}.{idx['se']}", c_exp, se)
    conv(layers, f"{name}.{idx['project']}" + ("" if bare_project else ".0"), c_exp, c_out, out)
    return out


# ResNet / ResNeXt -----------------------------------------------------------------------------

def _resnet(groups: int = 1, width_per_group: int = 64) -> list[ConvLayer]:
    """torchvision ResNet with Bottleneck blocks [3, 4, 6, 3] (v1.5: stride on the 3x3)."""
    layers: list[ConvLayer] = []
    hw = conv(layers, "conv1", 3, 64, IMAGE, 7, 2)  # 112
    hw = (hw + 2 - 3) // 2 + 1                        # maxpool 3x3 s2 p1 -> 56
    c_in = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        width = planes * width_per_group // 64 * groups
        c_out = planes * 4
        for b in range(blocks):
            name, stride = f"layer{stage}.{b}", (2 if stage > 1 and b == 0 else 1)
            conv(layers, f"{name}.conv1", c_in, width, hw)
            out = conv(layers, f"{name}.conv2", width, width, hw, 3, stride, groups)
            conv(layers, f"{name}.conv3", width, c_out, out)
            if b == 0:
                conv(layers, f"{name}.downsample.0", c_in, c_out, hw, 1, stride)
            c_in, hw = c_out, out
    return layers


def resnet50() -> list[ConvLayer]:
    return _resnet()


def resnext50_32x4d() -> list[ConvLayer]:
    return _resnet(groups=32, width_per_group=4)


# MobileNets / EfficientNet --------------------------------------------------------------------

def mobilenet_v2() -> list[ConvLayer]:
    """torchvision mobilenet_v2, width 1.0: rows of (expansion t, channels c, repeats n, stride s)."""
    layers: list[ConvLayer] = []
    hw = conv(layers, "features.0.0", 3, 32, IMAGE, 3, 2)
    c_in, i = 32, 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for j in range(n):
            hw = inverted_residual(layers, f"features.{i}.conv", c_in, c_in * t, c, hw, 3,
                                   s if j == 0 else 1, bare_project=True)
            c_in, i = c, i + 1
    conv(layers, f"features.{i}.0", c_in, 1280, hw)
    return layers


def mobilenet_v3_large() -> list[ConvLayer]:
    """torchvision mobilenet_v3_large: rows of (kernel, expanded, out, SE, stride)."""
    layers: list[ConvLayer] = []
    hw = conv(layers, "features.0.0", 3, 16, IMAGE, 3, 2)
    c_in = 16
    rows = ((3, 16, 16, False, 1), (3, 64, 24, False, 2), (3, 72, 24, False, 1),
            (5, 72, 40, True, 2), (5, 120, 40, True, 1), (5, 120, 40, True, 1),
            (3, 240, 80, False, 2), (3, 200, 80, False, 1), (3, 184, 80, False, 1),
            (3, 184, 80, False, 1), (3, 480, 112, True, 1), (3, 672, 112, True, 1),
            (5, 672, 160, True, 2), (5, 960, 160, True, 1), (5, 960, 160, True, 1))
    for i, (k, exp, out, use_se, s) in enumerate(rows, start=1):
        se = make_divisible(exp // 4) if use_se else None
        hw = inverted_residual(layers, f"features.{i}.block", c_in, exp, out, hw, k, s, se)
        c_in = out
    conv(layers, f"features.{len(rows) + 1}.0", c_in, 6 * c_in, hw)  # 160 -> 960
    return layers


def efficientnet_b0() -> list[ConvLayer]:
    """torchvision efficientnet_b0: stages of (expand, kernel, stride, in, out, repeats);
    SE squeeze = block input channels // 4."""
    layers: list[ConvLayer] = []
    hw = conv(layers, "features.0.0", 3, 32, IMAGE, 3, 2)
    stages = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
              (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
              (6, 3, 1, 192, 320, 1))
    for i, (t, k, s, c_in, c_out, n) in enumerate(stages, start=1):
        for j in range(n):
            c = c_in if j == 0 else c_out
            hw = inverted_residual(layers, f"features.{i}.{j}.block", c, c * t, c_out, hw, k,
                                   s if j == 0 else 1, se=max(1, c // 4))
    conv(layers, f"features.{len(stages) + 1}.0", 320, 1280, hw)
    return layers


# ConvNeXt -------------------------------------------------------------------------------------

def convnext_tiny() -> list[ConvLayer]:
    """torchvision convnext_tiny: 4x4/4 stem, stages of CNBlocks (7x7 depthwise, Linear dim->4dim,
    Linear 4dim->dim, here as 1x1 convs over the map), 2x2/2 downsampling convs between stages."""
    layers: list[ConvLayer] = []
    hw = conv(layers, "features.0.0", 3, 96, IMAGE, 4, 4, pad=0)  # 56
    dims, depths = (96, 192, 384, 768), (3, 3, 9, 3)
    for stage, (dim, depth) in enumerate(zip(dims, depths)):
        if stage:
            hw = conv(layers, f"features.{2 * stage}.1", dims[stage - 1], dim, hw, 2, 2, pad=0)
        for b in range(depth):
            name = f"features.{2 * stage + 1}.{b}.block"
            conv(layers, f"{name}.0", dim, dim, hw, 7, groups=dim)
            conv(layers, f"{name}.3", dim, 4 * dim, hw)
            conv(layers, f"{name}.5", 4 * dim, dim, hw)
    return layers


# RegNet ---------------------------------------------------------------------------------------

def regnet_stages(depth: int, w_0: int, w_a: float, w_m: float, group_width: int):
    """torchvision BlockParams.from_init_params (bottleneck multiplier 1): [(width, depth)]."""
    widths = [w_0 * w_m ** round(math.log((i * w_a + w_0) / w_0) / math.log(w_m))
              for i in range(depth)]
    widths = [int(round(w / 8) * 8) for w in widths]
    stages: list[list[int]] = []
    for w in widths:
        if stages and stages[-1][0] == w:
            stages[-1][1] += 1
        else:
            stages.append([w, 1])
    # _adjust_widths_groups_compatibilty: widths become multiples of the group width.
    return [(make_divisible(w, min(group_width, w)), d) for w, d in stages]


def regnety_800mf() -> list[ConvLayer]:
    """torchvision regnet_y_800mf: depth 14, w_0 56, w_a 38.84, w_m 2.4, group width 16, SE 0.25.
    That gives depths [1, 3, 8, 2] and widths [64, 144, 320, 784] (the RegNet formula gives
    56, 136, 320, 776, which torchvision rounds to multiples of the group width)."""
    layers: list[ConvLayer] = []
    group_width, se_ratio = 16, 0.25
    hw = conv(layers, "stem.0", 3, 32, IMAGE, 3, 2)
    c_in = 32
    for s, (w, depth) in enumerate(regnet_stages(14, 56, 38.84, 2.4, group_width), start=1):
        for b in range(depth):
            name, stride = f"trunk_output.block{s}.block{s}-{b}", (2 if b == 0 else 1)
            if b == 0:
                conv(layers, f"{name}.proj.0", c_in, w, hw, 1, stride)
            conv(layers, f"{name}.f.a.0", c_in, w, hw)
            out = conv(layers, f"{name}.f.b.0", w, w, hw, 3, stride, groups=w // group_width)
            squeeze_excite(layers, f"{name}.f.se", w, int(round(se_ratio * c_in)))
            conv(layers, f"{name}.f.c.0", w, w, out)
            c_in, hw = w, out
    return layers


NETWORKS = {
    "resnet50": resnet50,
    "resnext50_32x4d": resnext50_32x4d,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_large": mobilenet_v3_large,
    "efficientnet_b0": efficientnet_b0,
    "convnext_tiny": convnext_tiny,
    "regnety_800mf": regnety_800mf,
}


# Output ---------------------------------------------------------------------------------------

def dedupe(layers: list[ConvLayer]) -> list[tuple[ConvLayer, int]]:
    """Unique shapes in first-appearance order, each with its first layer and its count."""
    first: dict[Shape, ConvLayer] = {}
    counts: dict[Shape, int] = {}
    for layer in layers:
        first.setdefault(layer.shape, layer)
        counts[layer.shape] = counts.get(layer.shape, 0) + 1
    return [(layer, counts[shape]) for shape, layer in first.items()]


def rows(network: str, n: int) -> list[tuple]:
    return [(n, *astuple(layer.shape), network, layer.name, count)
            for layer, count in dedupe(NETWORKS[network]())]


def csv_text(table: list[tuple]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(table)
    return buf.getvalue()


def generate() -> dict[str, str]:
    """File name -> CSV text, for every file this script writes."""
    files = {f"{net}_n{n}.csv": csv_text(rows(net, n)) for net in NETWORKS for n in BATCH_SIZES}
    files["all_networks.csv"] = csv_text(
        [row for net in NETWORKS for row in rows(net, ALL_NETWORKS_BATCH)])
    return files


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (OUT_DIR / name).write_text(text)
    for net, build in NETWORKS.items():
        layers = build()
        macs = sum(layer.shape.macs() for layer in layers)
        print(f"{net:20s} {len(layers):3d} conv layers, {len(dedupe(layers)):3d} unique shapes, "
              f"{macs / 1e9:.3f} GMACs at N=1")
    print(f"wrote {len(BATCH_SIZES) * len(NETWORKS) + 1} files to {OUT_DIR}")


if __name__ == "__main__":
    main()
