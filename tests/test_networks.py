"""Checks jobs/networks.py: layer counts, MACs and parameter counts against torchvision, shape
validity of every CSV row, and that the CSVs on disk are what the script generates now."""

import csv

import pytest

from tests.jobs_scripts import load_script

networks = load_script("jobs_networks", "networks.py")

# Number of conv layers: nn.Conv2d modules in the torchvision model (SE fc1/fc2 are Conv2d).
#   resnet50, resnext50_32x4d: 1 stem + 16 bottlenecks x 3 + 4 downsample = 53
#   mobilenet_v2: 1 stem + 2 (t=1 block: dw, project) + 16 blocks x 3 + 1 last = 52
#   mobilenet_v3_large: 1 stem + 15 blocks (3 without expand conv; 8 with SE, +2 each)
#                       = 1 + 2 + 2x3 + 3x5 + 4x3 + 2x5 + 3x5 + 1 last = 62
#   efficientnet_b0: 1 stem + 1 MBConv1 x 4 (dw, se x2, project) + 15 MBConv6 x 5 + 1 last = 81
#   convnext_tiny: 22 nn.Conv2d (1 stem + 18 depthwise 7x7 + 3 downsample) plus the 36
#                  pointwise nn.Linear layers of the 18 blocks, counted here as 1x1 convs = 58
#   regnety_800mf: 1 stem + 14 blocks x 5 (a, b, se x2, c) + 4 stage projections = 75
LAYER_COUNTS = {
    "resnet50": 53,
    "resnext50_32x4d": 53,
    "mobilenet_v2": 52,
    "mobilenet_v3_large": 62,
    "efficientnet_b0": 81,
    "convnext_tiny": 58,
    "regnety_800mf": 75,
}

# Conv-only GMACs at N=1, 224x224. The published figures are torchvision's "_ops" (GMACs of
# the whole model), which include the classifier head; the head's Linear MACs are subtracted:
#   resnet50           4.089 - 2048*1000                  = 4.087
#   resnext50_32x4d    4.23  - 2048*1000                  = 4.228  (often quoted as 4.26)
#   mobilenet_v2       0.301 - 1280*1000                  = 0.300
#   mobilenet_v3_large 0.217 - (960*1280 + 1280*1000)     = 0.2145 (paper: 219M incl. head)
#   efficientnet_b0    0.386 - 1280*1000                  = 0.385
#   convnext_tiny      4.456 - 768*1000                   = 4.455
#   regnety_800mf      0.834 - 784*1000                   = 0.833  (the "800MF" name is rounded)
HEAD_MACS = {
    "resnet50": 2048 * 1000,
    "resnext50_32x4d": 2048 * 1000,
    "mobilenet_v2": 1280 * 1000,
    "mobilenet_v3_large": 960 * 1280 + 1280 * 1000,
    "efficientnet_b0": 1280 * 1000,
    "convnext_tiny": 768 * 1000,
    "regnety_800mf": 784 * 1000,
}
PUBLISHED_GMACS = {
    "resnet50": 4.089,
    "resnext50_32x4d": 4.23,
    "mobilenet_v2": 0.301,
    "mobilenet_v3_large": 0.217,
    "efficientnet_b0": 0.386,
    "convnext_tiny": 4.456,
    "regnety_800mf": 0.834,
}

# torchvision "num_params". Recomputed from the conv shapes plus what sits around them:
# BatchNorm (2 per channel) after each conv, conv biases where present, and the classifier.
NUM_PARAMS = {
    "resnet50": 25_557_032,
    "resnext50_32x4d": 25_028_904,
    "mobilenet_v2": 3_504_872,
    "mobilenet_v3_large": 5_483_032,
    "efficientnet_b0": 5_288_548,
    "convnext_tiny": 28_589_128,
    "regnety_800mf": 6_432_512,
}
CLASSIFIER_PARAMS = {
    "resnet50": 2048 * 1000 + 1000,
    "resnext50_32x4d": 2048 * 1000 + 1000,
    "mobilenet_v2": 1280 * 1000 + 1000,
    "mobilenet_v3_large": 960 * 1280 + 1280 + 1280 * 1000 + 1000,
    "efficientnet_b0": 1280 * 1000 + 1000,
    "convnext_tiny": 2 * 768 + 768 * 1000 + 1000,  # LayerNorm2d + Linear
    "regnety_800mf": 784 * 1000 + 1000,
}


def _params(net: str, layers) -> int:
    total = CLASSIFIER_PARAMS[net]
    for layer in layers:
        s = layer.shape
        total += s.K * (s.C // s.G) * s.R * s.S
        if net == "convnext_tiny":
            total += s.K  # every conv and Linear has a bias; norms are counted below
        elif ".fc" in layer.name:
            total += s.K  # squeeze-excitation convs: bias, no norm
        else:
            total += 2 * s.K  # bias-free conv followed by BatchNorm
    if net == "convnext_tiny":
        dims, depths = (96, 192, 384, 768), (3, 3, 9, 3)
        total += 2 * 96  # stem LayerNorm2d
        total += sum(2 * d for d in dims[:3])  # LayerNorm2d before each downsampling conv
        total += sum(3 * d * n for d, n in zip(dims, depths))  # block LayerNorm + layer scale
    return total


def test_networks_named_as_specified():
    assert list(networks.NETWORKS) == list(LAYER_COUNTS)


@pytest.mark.parametrize("net", LAYER_COUNTS)
def test_layer_count(net):
    layers = networks.NETWORKS[net]()
    assert len(layers) == LAYER_COUNTS[net]
    assert sum(count for _, count in networks.dedupe(layers)) == LAYER_COUNTS[net]


@pytest.mark.parametrize("net", LAYER_COUNTS)
def test_macs_match_published(net):
    macs = sum(layer.shape.macs(1) for layer in networks.NETWORKS[net]())
    expected = PUBLISHED_GMACS[net] * 1e9 - HEAD_MACS[net]
    assert macs == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("net", LAYER_COUNTS)
def test_parameter_count_matches_torchvision(net):
    assert _params(net, networks.NETWORKS[net]()) == NUM_PARAMS[net]


def test_files_on_disk_match_generator():
    generated = networks.generate()
    on_disk = {p.name: p.read_text() for p in networks.OUT_DIR.glob("*.csv")}
    assert sorted(on_disk) == sorted(generated), "run: python jobs/networks.py"
    for name, text in generated.items():
        assert on_disk[name] == text, f"{name} is stale; run: python jobs/networks.py"


def _read(name):
    with open(networks.OUT_DIR / name, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == networks.COLUMNS
        return list(reader)


@pytest.mark.parametrize("name", sorted(networks.generate()))
def test_csv_rows_are_valid_shapes(name):
    rows = _read(name)
    assert rows
    shapes = set()
    for row in rows:
        v = {k: int(row[k]) for k in networks.COLUMNS if k not in ("network", "layer")}
        assert all(v[k] >= (0 if k.startswith("pad") else 1) for k in v), row
        assert v["C"] % v["G"] == 0 and v["K"] % v["G"] == 0
        p = (v["H"] + 2 * v["pad_h"] - v["dil_h"] * (v["R"] - 1) - 1) // v["stride_h"] + 1
        q = (v["W"] + 2 * v["pad_w"] - v["dil_w"] * (v["S"] - 1) - 1) // v["stride_w"] + 1
        assert p >= 1 and q >= 1, row
        assert row["network"] in networks.NETWORKS and row["layer"]
        shapes.add((row["network"], v["N"], *(v[k] for k in networks.SHAPE_FIELDS)))
    assert len(shapes) == len(rows), "a shape repeats within one network"


@pytest.mark.parametrize("net", LAYER_COUNTS)
@pytest.mark.parametrize("n", networks.BATCH_SIZES)
def test_csv_totals(net, n):
    rows = _read(f"{net}_n{n}.csv")
    assert {int(r["N"]) for r in rows} == {n} and {r["network"] for r in rows} == {net}
    assert sum(int(r["count"]) for r in rows) == LAYER_COUNTS[net]
    macs = 0
    for r in rows:
        shape = networks.Shape(**{k: int(r[k]) for k in networks.SHAPE_FIELDS})
        macs += int(r["count"]) * shape.macs(n)
    assert macs == n * sum(layer.shape.macs(1) for layer in networks.NETWORKS[net]())


def test_all_networks_is_the_union_at_n32():
    rows = _read("all_networks.csv")
    expected = [r for net in LAYER_COUNTS for r in _read(f"{net}_n32.csv")]
    assert rows == expected
