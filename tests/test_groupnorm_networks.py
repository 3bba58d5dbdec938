"""Checks jobs/groupnorm_networks.py: GroupNorm layer counts and channels against published and
derivable figures, the UNet's skip concatenations against diffusers' constructor arithmetic,
shape validity of every CSV row, and that the CSVs on disk are what the script generates now.

The full layer lists (module path, C, H, W, G, in forward order) were also checked once, outside
this test, against the real models: forward hooks on every nn.GroupNorm of diffusers 0.42.1
UNet2DConditionModel (SD 1.5 config at 64x64, SD 2 config at 96x96), AutoencoderKL's decoder
(SD config, 64x64x4 latent) and torchvision 0.29 resnet50(norm_layer=GroupNorm(32, c)) gave
exactly these sequences."""

import csv
from collections import Counter

import pytest

from tests.jobs_scripts import load_script

gn = load_script("jobs_groupnorm_networks", "groupnorm_networks.py")
convs = load_script("jobs_networks_for_groupnorm", "networks.py")

# GroupNorm layers per network, counted from the module definitions:
#   resnet50_gn: one norm per conv: 1 stem + 16 bottlenecks x 3 + 4 downsample = 53
#   sd15_unet (and sd2_768_unet, the same modules):
#     down_blocks.0-2 CrossAttnDownBlock2D: 2 x (ResnetBlock2D norm1, norm2 + Transformer2DModel
#                     norm) = 6 each                                                  18
#     down_blocks.3   DownBlock2D: 2 resnets x 2                                       4
#     mid_block       UNetMidBlock2DCrossAttn: resnet 2 + transformer 1 + resnet 2     5
#     up_blocks.0     UpBlock2D: 3 resnets x 2                                         6
#     up_blocks.1-3   CrossAttnUpBlock2D: 3 x (2 + 1) = 9 each                        27
#     conv_norm_out                                                                    1
#                                                                              total  61
#   sd_vae_decoder:
#     mid_block       UNetMidBlock2D: resnet 2 + Attention.group_norm 1 + resnet 2     5
#     up_blocks.0-3   UpDecoderBlock2D: layers_per_block + 1 = 3 resnets x 2 = 6 each 24
#     conv_norm_out                                                                    1
#                                                                              total  30
LAYER_COUNTS = {"resnet50_gn": 53, "sd15_unet": 61, "sd2_768_unet": 61, "sd_vae_decoder": 30}

UNET_BLOCK_COUNTS = {
    "down_blocks.0": 6, "down_blocks.1": 6, "down_blocks.2": 6, "down_blocks.3": 4,
    "mid_block": 5,
    "up_blocks.0": 6, "up_blocks.1": 9, "up_blocks.2": 9, "up_blocks.3": 9,
    "conv_norm_out": 1,
}
VAE_BLOCK_COUNTS = {
    "decoder.mid_block": 5,
    "decoder.up_blocks.0": 6, "decoder.up_blocks.1": 6, "decoder.up_blocks.2": 6,
    "decoder.up_blocks.3": 6,
    "decoder.conv_norm_out": 1,
}

# Summed channels (each GroupNorm has 2 x C affine parameters).
#   resnet50_gn: 26,560, the channels of ResNet-50's 53 BatchNorms: Keras' ResNet50 reports
#     53,120 non-trainable parameters (a running mean and variance per channel), and torchvision's
#     25,557,032 parameters = conv weights + fc + 2 per BatchNorm channel (checked below).
#   sd15_unet:  62,720 (125,440 GroupNorm parameters); sd_vae_decoder: 11,520 (23,040).
CHANNEL_SUMS = {"resnet50_gn": 26_560, "sd15_unet": 62_720, "sd2_768_unet": 62_720,
                "sd_vae_decoder": 11_520}
KERAS_RESNET50_NON_TRAINABLE = 53_120
TORCHVISION_RESNET50_PARAMS = 25_557_032


def _block(name: str) -> str:
    """The block a layer belongs to: the path up to the block index (or the layer itself)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in ("down_blocks", "up_blocks"):
            return ".".join(parts[: i + 2])
        if part == "mid_block":
            return ".".join(parts[: i + 1])
    return name


def test_networks_named_as_specified():
    assert list(gn.NETWORKS) == list(LAYER_COUNTS)


@pytest.mark.parametrize("net", LAYER_COUNTS)
def test_layer_count_and_channels(net):
    layers = gn.NETWORKS[net]()
    assert len(layers) == LAYER_COUNTS[net]
    assert len({layer.name for layer in layers}) == len(layers), "layer names are unique"
    assert sum(layer.C for layer in layers) == CHANNEL_SUMS[net]
    for layer in layers:
        assert layer.G == 32 and layer.C % layer.G == 0, layer
        assert layer.H == layer.W >= 1, layer


def test_resnet50_gn_has_a_norm_after_every_conv_of_resnet50():
    """GroupNorm in place of every BatchNorm: the norm after each conv of jobs/networks.py's
    resnet50 has the conv's output channels K at its output size P x Q."""
    norms, conv_layers = gn.resnet50_gn(), convs.resnet50()
    assert len(norms) == len(conv_layers) == 53
    for norm, conv in zip(norms, conv_layers):
        expected = conv.name.replace("conv", "bn").replace("downsample.0", "downsample.1")
        assert norm.name == expected
        assert (norm.C, norm.H, norm.W) == (conv.shape.K, conv.shape.P, conv.shape.Q)


def test_resnet50_gn_channels_match_published_parameter_counts():
    channels = sum(layer.C for layer in gn.resnet50_gn())
    assert 2 * channels == KERAS_RESNET50_NON_TRAINABLE
    conv_weights = sum(s.K * (s.C // s.G) * s.R * s.S
                       for s in (layer.shape for layer in convs.resnet50()))
    fc = 2048 * 1000 + 1000
    assert conv_weights + fc + 2 * channels == TORCHVISION_RESNET50_PARAMS


@pytest.mark.parametrize("net, expected", [("sd15_unet", UNET_BLOCK_COUNTS),
                                           ("sd2_768_unet", UNET_BLOCK_COUNTS),
                                           ("sd_vae_decoder", VAE_BLOCK_COUNTS)])
def test_norms_per_block(net, expected):
    assert dict(Counter(_block(layer.name) for layer in gn.NETWORKS[net]())) == expected


def test_unet_up_block_inputs_follow_diffusers_constructor():
    """The walk derives norm1's channels from the skip stack; diffusers sizes the same resnets in
    UNet2DConditionModel.__init__ / CrossAttnUpBlock2D / UpBlock2D as
    prev_output_channel (i == 0) or out_channels, plus in_channels (last) or out_channels."""
    boc = gn.UNET_BLOCK_OUT_CHANNELS
    rev = list(reversed(boc))
    num_layers = gn.UNET_LAYERS_PER_BLOCK + 1
    expected = {}
    output_channel = rev[0]
    for i in range(len(boc)):
        prev_output_channel, output_channel = output_channel, rev[i]
        input_channel = rev[min(i + 1, len(boc) - 1)]
        for j in range(num_layers):
            res_skip = input_channel if j == num_layers - 1 else output_channel
            resnet_in = prev_output_channel if j == 0 else output_channel
            expected[f"up_blocks.{i}.resnets.{j}.norm1"] = resnet_in + res_skip
            expected[f"up_blocks.{i}.resnets.{j}.norm2"] = output_channel
    got = {layer.name: layer.C for layer in gn.sd15_unet() if layer.name in expected}
    assert got == expected
    assert [got[f"up_blocks.{i}.resnets.{j}.norm1"] for i in range(4) for j in range(3)] == [
        2560, 2560, 2560, 2560, 2560, 1920, 1920, 1280, 960, 960, 640, 640]


def test_unet_resolutions():
    for net, latent in (("sd15_unet", 64), ("sd2_768_unet", 96)):
        sizes = {_block(layer.name): layer.H for layer in gn.NETWORKS[net]()}
        for i, div in enumerate((1, 2, 4, 8)):
            assert sizes[f"down_blocks.{i}"] == latent // div
            assert sizes[f"up_blocks.{3 - i}"] == latent // div
        assert sizes["mid_block"] == latent // 8 and sizes["conv_norm_out"] == latent
    a, b = gn.sd15_unet(), gn.sd2_768_unet()
    assert [(x.name, x.C, 3 * x.H) for x in a] == [(y.name, y.C, 2 * y.H) for y in b]


def test_vae_decoder_resolutions():
    layers = gn.sd_vae_decoder()
    sizes = {_block(layer.name): layer.H for layer in layers}
    assert sizes == {"decoder.mid_block": 64, "decoder.up_blocks.0": 64,
                     "decoder.up_blocks.1": 128, "decoder.up_blocks.2": 256,
                     "decoder.up_blocks.3": 512, "decoder.conv_norm_out": 512}
    assert layers[-1].C == 128 and layers[0].C == 512


def test_files_on_disk_match_generator():
    generated = gn.generate()
    on_disk = {p.name: p.read_text() for p in gn.OUT_DIR.glob("*.csv")}
    assert sorted(on_disk) == sorted(generated), "run: python jobs/groupnorm_networks.py"
    for name, text in generated.items():
        assert on_disk[name] == text, f"{name} is stale; run: python jobs/groupnorm_networks.py"


def _read(name, columns):
    with open(gn.OUT_DIR / name, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == columns
        return list(reader)


@pytest.mark.parametrize("net", LAYER_COUNTS)
@pytest.mark.parametrize("n", gn.BATCH_SIZES)
def test_csv_rows(net, n):
    rows = _read(f"{net}_n{n}.csv", gn.COLUMNS)
    assert len(rows) == LAYER_COUNTS[net]
    for row in rows:
        v = {k: int(row[k]) for k in ("N", "C", "H", "W", "G")}
        assert v["N"] == n and v["C"] % v["G"] == 0 and v["H"] >= 1 and v["W"] >= 1, row
        assert row["layer"]
    assert sum(int(r["C"]) for r in rows) == CHANNEL_SUMS[net]


def test_all_groupnorm_is_every_network_at_every_batch():
    rows = _read(gn.ALL_FILE, gn.ALL_COLUMNS)
    expected = [{**r, "network": net} for net in LAYER_COUNTS for n in gn.BATCH_SIZES
                for r in _read(f"{net}_n{n}.csv", gn.COLUMNS)]
    assert rows == expected
    assert len(rows) == len(gn.BATCH_SIZES) * sum(LAYER_COUNTS.values())
