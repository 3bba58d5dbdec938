"""Checks jobs/dwsep_networks.py: depthwise -> pointwise pair counts per network (kept and left
out, and why), whole-network mult-adds and parameter counts rebuilt from the pairs against the
published figures (MobileNetV1, MnasNet, Xception), the torchvision pairs against the
convolution layers of jobs/networks.py (whose totals tests/test_networks.py checks against
torchvision), every CSV row as a valid `dwsep_fwd` shape, and that the CSVs on disk are what the
script generates now."""

import csv
import re
from collections import Counter

import pytest

from kernels.dwsep.problem import DWSEP_ACTIVATIONS, DwsepProblem
from tests.jobs_scripts import load_script

dw = load_script("jobs_dwsep_networks", "dwsep_networks.py")
convs = load_script("jobs_networks_for_dwsep", "networks.py")

# Depthwise convolutions per network, each followed by a pointwise convolution:
#   mobilenet_v1: 13 depthwise-separable blocks (Howard et al. 2017, Table 1)
#   mobilenet_v2: 17 inverted residuals (t, c, n, s rows: n = 1 + 2 + 3 + 4 + 3 + 3 + 1)
#   mobilenet_v3_large: 15 bneck rows
#   efficientnet_b0: 16 MBConv blocks (repeats 1 + 2 + 2 + 3 + 3 + 4 + 1)
#   mnasnet1_0: 1 depthwise-separable block + 16 inverted residuals (3 + 3 + 3 + 2 + 4 + 1)
#   xception: 34 separable convolutions (entry 3 blocks x 2, middle 8 x 3, exit 2 + 2)
DEPTHWISE = {"mobilenet_v1": 13, "mobilenet_v2": 17, "mobilenet_v3_large": 15,
             "efficientnet_b0": 16, "mnasnet1_0": 17, "xception": 34}
# Kept: only a per-channel affine and an activation of the operator's between the stages.
#   mobilenet_v3_large: features.1-3 (ReLU) and 7-10 (hardswish), no SE; out: 8 SE blocks
#   efficientnet_b0: every MBConv has squeeze-excitation
KEPT = {"mobilenet_v1": 13, "mobilenet_v2": 17, "mobilenet_v3_large": 7, "efficientnet_b0": 0,
        "mnasnet1_0": 17, "xception": 34}
LEFT_OUT_REASONS = {
    "mobilenet_v3_large": {"squeeze-excitation": 8},
    "efficientnet_b0": {"squeeze-excitation": 16},
}
# The activation of each kept pair, in forward order.
ACTIVATIONS = {"mobilenet_v1": ["relu6"] * 13, "mobilenet_v2": ["relu6"] * 17,
               "mobilenet_v3_large": ["relu"] * 3 + ["hardswish"] * 4,
               "efficientnet_b0": [], "mnasnet1_0": ["relu"] * 17, "xception": ["none"] * 34}

# MobileNetV1 1.0 224 (Howard et al. 2017): 569 M mult-adds, of which 1x1 convolutions 94.86 %
# and depthwise 3x3 3.06 % (Table 2); Keras Applications' MobileNet: 4,253,864 parameters,
# 4,231,976 trainable (BatchNorm: gamma, beta trainable; moving mean and variance not).
V1_MULT_ADDS_M, V1_POINTWISE_SHARE, V1_DEPTHWISE_SHARE = 569, 94.86, 3.06
V1_KERAS_PARAMS, V1_KERAS_TRAINABLE = 4_253_864, 4_231_976
# torchvision mnasnet1_0: 4,383,312 parameters, 0.314 GMACs ("_ops").
MNASNET_PARAMS, MNASNET_GMACS = 4_383_312, 0.314
# Keras Applications' Xception: 22,910,480 parameters, 54,528 non-trainable (the BatchNorms'
# moving mean and variance: 27,264 channels).
XCEPTION_PARAMS, XCEPTION_NON_TRAINABLE = 22_910_480, 54_528


def test_networks_named_as_specified():
    assert list(dw.NETWORKS) == list(DEPTHWISE)


def test_activations_are_the_operators():
    assert dw.ACTIVATIONS == DWSEP_ACTIVATIONS
    assert dw.SHAPE_COLUMNS == DwsepProblem.FIELDS


@pytest.mark.parametrize("net", DEPTHWISE)
def test_pair_counts(net):
    pairs, kept, out = dw.NETWORKS[net](), dw.fused(net), dw.left_out(net)
    assert len(pairs) == DEPTHWISE[net] == len(kept) + len(out)
    assert len(kept) == KEPT[net]
    assert len({p.layer for p in pairs}) == len(pairs), "layer names are unique"
    reasons = Counter(next(word for word in ("squeeze-excitation", "activations") if word in why)
                      for _, why in out)
    assert dict(reasons) == LEFT_OUT_REASONS.get(net, {})
    assert [p.activation for p in kept] == ACTIVATIONS[net]
    for p in kept:
        assert not p.se, p
        assert p.multiplier == 1 and p.pw_bias == 1 and p.pad == (p.R - 1) // 2, p


def _docstring_counts():
    """Per network, the (kept, left out) the module docstring states."""
    text = " ".join(dw.__doc__.split())
    found = {}
    for net in DEPTHWISE:
        m = re.search(rf"\b{net}\b .*? Kept (\d+).*? left out (\d+)", text)
        assert m, f"the docstring gives no counts for {net}"
        found[net] = (int(m.group(1)), int(m.group(2)))
    return found


def test_docstring_states_the_counts():
    assert _docstring_counts() == {net: (KEPT[net], DEPTHWISE[net] - KEPT[net])
                                   for net in DEPTHWISE}


# Whole networks rebuilt from their pairs --------------------------------------------------------

def _chain(pairs):
    """A plain chain: each pair reads the channels and map size the previous one wrote."""
    for a, b in zip(pairs, pairs[1:]):
        assert (b.C, b.H, b.W) == (a.K, a.P, a.Q), (a, b)


def test_mobilenet_v1_matches_the_paper_and_keras():
    pairs = dw.mobilenet_v1()
    _chain(pairs)
    assert (pairs[0].C, pairs[0].H, pairs[-1].K, pairs[-1].P) == (32, 112, 1024, 7)
    assert [p.stride for p in pairs] == [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
    stem, fc = 112 * 112 * 32 * 3 * 3 * 3, 1024 * 1000
    dw_macs, pw_macs = sum(p.dw_macs() for p in pairs), sum(p.pw_macs() for p in pairs)
    total = stem + dw_macs + pw_macs + fc
    assert round(total / 1e6) == V1_MULT_ADDS_M
    assert round(100 * pw_macs / total, 2) == V1_POINTWISE_SHARE
    assert round(100 * dw_macs / total, 2) == V1_DEPTHWISE_SHARE
    weights = 3 * 3 * 3 * 32 + sum(p.R * p.S * p.mid + p.mid * p.K for p in pairs)
    weights += 1024 * 1000 + 1000  # the classifier: a 1x1 conv with bias
    bn_channels = 32 + sum(p.mid + p.K for p in pairs)
    assert weights + 2 * bn_channels == V1_KERAS_TRAINABLE
    assert weights + 4 * bn_channels == V1_KERAS_PARAMS


def test_mnasnet_matches_torchvision():
    """Stem, the pairs with each inverted residual's 1x1 expansion (from the previous pair's
    output channels to this pair's depthwise channels, at its input size), the 1x1 conv to 1280
    and the classifier; a BatchNorm (2 parameters per channel) after every conv."""
    pairs = dw.mnasnet1_0()
    params = 3 * 3 * 3 * 32 + 2 * 32
    macs = 112 * 112 * 32 * 3 * 3 * 3
    c_in = 32
    for i, p in enumerate(pairs):
        if i:  # layers.3 -> layers.6 reads the stem's output directly
            params += c_in * p.C + 2 * p.C
            macs += p.H * p.W * c_in * p.C
        else:
            assert p.C == c_in
        params += p.R * p.S * p.C + 2 * p.C + p.C * p.K + 2 * p.K
        macs += p.dw_macs() + p.pw_macs()
        c_in = p.K
    assert (c_in, pairs[-1].P) == (320, 7)
    params += 320 * 1280 + 2 * 1280 + 1280 * 1000 + 1000
    macs += 7 * 7 * 320 * 1280 + 1280 * 1000
    assert params == MNASNET_PARAMS
    assert macs / 1e9 == pytest.approx(MNASNET_GMACS, rel=0.002)


def _xception_blocks(pairs):
    blocks: dict[int, list] = {}
    for p in pairs:
        block = int(re.fullmatch(r"block(\d+)_sepconv\d", p.layer).group(1))
        blocks.setdefault(block, []).append(p)
    return blocks


def test_xception_matches_keras():
    """block1's two convs, the separable convs (depthwise and pointwise weights, no bias), a 1x1
    stride-2 shortcut conv in every block that ends in a max pool (the next block's map is
    smaller), a BatchNorm (4 parameters per channel) after each of those, and the classifier."""
    pairs = dw.xception()
    blocks = _xception_blocks(pairs)
    assert {b: len(v) for b, v in blocks.items()} == {
        2: 2, 3: 2, 4: 2, **{b: 3 for b in range(5, 13)}, 13: 2, 14: 2}
    weights = 3 * 3 * 3 * 32 + 3 * 3 * 32 * 64
    bn_channels = 32 + 64
    order = sorted(blocks)
    for b in order:
        members = blocks[b]
        _chain(members)
        assert len({(p.H, p.W) for p in members}) == 1 and members[0].stride == 1
        for p in members:
            weights += p.R * p.S * p.C + p.C * p.K
            bn_channels += p.K
        later = blocks.get(b + 1)
        if later and later[0].H < members[0].H:
            assert later[0].H == (members[0].H + 1) // 2  # max pool 3x3/2, padding same
            weights += members[0].C * members[-1].K
            bn_channels += members[-1].K
    assert [blocks[b][0].H for b in (2, 3, 4, 5, 13, 14)] == [147, 74, 37, 19, 19, 10]
    weights += 2048 * 1000 + 1000
    assert 2 * bn_channels == XCEPTION_NON_TRAINABLE
    assert weights + 4 * bn_channels == XCEPTION_PARAMS


@pytest.mark.parametrize("net", ["mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0"])
def test_torchvision_pairs_match_the_convolution_layers(net):
    """Each depthwise conv of jobs/networks.py's layer list and the next conv that is not a
    squeeze-excitation fc: the same shapes, the same module paths, SE where an fc sits between."""
    layers = convs.NETWORKS[net]()
    expected = []
    for i, layer in enumerate(layers):
        s = layer.shape
        if s.G == 1 or s.G != s.C:
            continue
        rest = [nxt for nxt in layers[i + 1:] if ".fc" not in nxt.name]
        pw = rest[0].shape
        assert (pw.R, pw.S, pw.G, pw.C, pw.H) == (1, 1, 1, s.K, s.P)
        se = ".fc1" in layers[i + 1].name
        expected.append((f"{layer.name}+{rest[0].name}", s.C, s.H, s.W, pw.K, s.R, s.S,
                         s.stride_h, s.pad_h, se))
    got = [(p.layer, p.C, p.H, p.W, p.K, p.R, p.S, p.stride, p.pad, p.se)
           for p in dw.NETWORKS[net]()]
    assert got == expected


# The files --------------------------------------------------------------------------------------

def test_files_on_disk_match_generator():
    generated = dw.generate()
    on_disk = {p.name: p.read_text() for p in dw.OUT_DIR.glob("*.csv")}
    assert sorted(on_disk) == sorted(generated), "run: python jobs/dwsep_networks.py"
    for name, text in generated.items():
        assert on_disk[name] == text, f"{name} is stale; run: python jobs/dwsep_networks.py"


def test_a_network_without_fused_pairs_has_no_file():
    names = set(dw.generate())
    for net in DEPTHWISE:
        assert (f"{net}_n1.csv" in names) == (KEPT[net] > 0)


def _read(name, columns):
    with open(dw.OUT_DIR / name, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == columns
        return list(reader)


@pytest.mark.parametrize("net", [net for net in DEPTHWISE if KEPT[net]])
@pytest.mark.parametrize("n", dw.BATCH_SIZES)
def test_csv_rows_are_valid_shapes(net, n):
    rows = _read(f"{net}_n{n}.csv", dw.COLUMNS)
    assert len(rows) == KEPT[net]
    macs = 0
    for row, pair in zip(rows, dw.fused(net)):
        p = DwsepProblem.from_fields("dwsep_fwd", "bf16", row)
        assert p.N == n and row["layer"] == pair.layer
        assert (p.P, p.Q, p.MC) == (pair.P, pair.Q, pair.mid)
        macs += p.flops // 2
    assert macs == n * sum(p.dw_macs() + p.pw_macs() for p in dw.fused(net))


def test_all_dwsep_is_every_network_at_every_batch():
    rows = _read(dw.ALL_FILE, dw.ALL_COLUMNS)
    expected = [{**r, "network": net} for net in DEPTHWISE if KEPT[net]
                for n in dw.BATCH_SIZES for r in _read(f"{net}_n{n}.csv", dw.COLUMNS)]
    assert rows == expected
    assert len(rows) == len(dw.BATCH_SIZES) * sum(KEPT.values())
