"""Group-normalization problem sets taken from real networks.

Writes the GroupNorm layers of three networks (the UNet at two latent sizes) as problem-set
CSVs for `groupnorm_bwd` in jobs/networks/groupnorm/:

    <net>_n<N>.csv       for each network and batch size N in BATCH_SIZES; columns N,C,H,W,G,layer
    all_groupnorm.csv    every network at every batch size, with a `network` column

One row per GroupNorm layer instance, in forward order: a shape used by k layers appears k
times (no `count` column). C counts all channels, G the groups (each sees C/G channels), and
H x W is the map being normalized. `layer` is the module path in the reference implementation.

Networks (norm_num_groups = 32 everywhere):
  resnet50_gn     ResNet-50 with GroupNorm in place of every BatchNorm (Wu & He, "Group
                  Normalization", 2018), 224x224 input; torchvision's layout as in
                  jobs/networks.py (v1.5, stride on the 3x3), i.e. torchvision's
                  resnet50(norm_layer=lambda c: nn.GroupNorm(32, c)). With the stride on the
                  1x1 (v1) the first block of stages 2-4 would have bn1 at the halved size.
  sd15_unet       Stable Diffusion 1.x UNet (diffusers UNet2DConditionModel with SD 1.5's config)
                  on 64x64 latents (512x512 images). SD 2.x-base has the same GroupNorms (its
                  config differs only in attention heads, linear projections and the text width).
  sd2_768_unet    The same UNet on the 96x96 latents of SD 2.x-768-v (768x768 images).
  sd_vae_decoder  The decoder of SD's AutoencoderKL (diffusers Decoder), 64x64x4 latent to a
                  512x512 image. (Its mid-block Attention applies group_norm to the map flattened
                  to (N, C, H*W): the same statistics as over (N, C, H, W).)

The layer lists follow the diffusers definitions (no torch or diffusers import): a forward pass
over shapes that tracks channels and resolution, and in the UNet the stack of skip connections,
so the channels of each up-block resnet's concatenated input come out of the walk, not a table.
Read from diffusers: unets/unet_2d_condition.py (UNet2DConditionModel.__init__),
unets/unet_2d_blocks.py (CrossAttnDownBlock2D, DownBlock2D, UNetMidBlock2DCrossAttn,
CrossAttnUpBlock2D, UpBlock2D, UNetMidBlock2D, UpDecoderBlock2D), resnet.py (ResnetBlock2D:
norm1 on its input channels, norm2 on its output channels, both at the block's resolution),
transformers/transformer_2d.py (Transformer2DModel.norm on in_channels), attention_processor.py
(Attention.group_norm, used by the VAE's mid-block attention) and autoencoders/vae.py (Decoder).

Regenerate with:  python jobs/groupnorm_networks.py   (stdlib only; tests/test_groupnorm_networks.py
checks the layer counts and that the files on disk match what this script generates).
"""

import csv
import io
from dataclasses import dataclass
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "networks" / "groupnorm"
BATCH_SIZES = (1, 8, 32)
GROUPS = 32
COLUMNS = ("N", "C", "H", "W", "G", "layer")
ALL_COLUMNS = ("N", "C", "H", "W", "G", "network", "layer")
ALL_FILE = "all_groupnorm.csv"


@dataclass(frozen=True)
class GNLayer:
    """One GroupNorm of a single image: C channels in G groups over an H x W map."""

    name: str
    C: int
    H: int
    W: int
    G: int = GROUPS


def norm(layers: list[GNLayer], name: str, channels: int, hw: int) -> None:
    layers.append(GNLayer(name, channels, hw, hw))


def resnet_block(layers: list[GNLayer], name: str, c_in: int, c_out: int, hw: int) -> None:
    """diffusers ResnetBlock2D: norm1 -> conv1 (c_in -> c_out) -> norm2 -> conv2, no resampling."""
    norm(layers, f"{name}.norm1", c_in, hw)
    norm(layers, f"{name}.norm2", c_out, hw)


# ResNet-50-GN ---------------------------------------------------------------------------------

def resnet50_gn(image: int = 224) -> list[GNLayer]:
    """Bottlenecks [3, 4, 6, 3]: bn1 (width, block input size), bn2 and bn3 (width, 4 x width,
    after the stride), downsample.1 (4 x width) in each stage's first block; stem bn1."""
    layers: list[GNLayer] = []
    hw = (image + 2 * 3 - 7) // 2 + 1                 # conv1 7x7/2 -> 112
    norm(layers, "bn1", 64, hw)
    hw = (hw + 2 - 3) // 2 + 1                         # maxpool 3x3/2 -> 56
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        for b in range(blocks):
            name = f"layer{stage}.{b}"
            out = (hw + 2 - 3) // 2 + 1 if stage > 1 and b == 0 else hw  # conv2 3x3, pad 1
            norm(layers, f"{name}.bn1", width, hw)
            norm(layers, f"{name}.bn2", width, out)
            norm(layers, f"{name}.bn3", 4 * width, out)
            if b == 0:
                norm(layers, f"{name}.downsample.1", 4 * width, out)
            hw = out
    return layers


# Stable Diffusion UNet ------------------------------------------------------------------------

# SD 1.5's UNet config: UNet2DConditionModel's defaults (SD 1.5 sets cross_attention_dim to 768
# and sample_size to 64, which change no GroupNorm).
UNET_BLOCK_OUT_CHANNELS = (320, 640, 1280, 1280)
UNET_LAYERS_PER_BLOCK = 2
UNET_DOWN_BLOCKS = ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",)
UNET_UP_BLOCKS = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3


def sd_unet(latent: int) -> list[GNLayer]:
    """UNet2DConditionModel forward over shapes. Down blocks: layers_per_block resnets (each
    followed by a Transformer2DModel in CrossAttn blocks), then a stride-2 Downsample2D except in
    the last; every resnet/attention output and every downsample output (and conv_in's output)
    is pushed as a skip. Mid: resnet, transformer, resnet. Up blocks: layers_per_block + 1
    resnets, each on cat([hidden, skips.pop()]), then a 2x Upsample2D except in the last."""
    layers: list[GNLayer] = []
    channels, hw = UNET_BLOCK_OUT_CHANNELS, latent
    ch = channels[0]                                   # conv_in: 4 -> 320
    skips = [ch]
    for i, (kind, out) in enumerate(zip(UNET_DOWN_BLOCKS, channels)):
        for j in range(UNET_LAYERS_PER_BLOCK):
            resnet_block(layers, f"down_blocks.{i}.resnets.{j}", ch, out, hw)
            ch = out
            if kind == "CrossAttnDownBlock2D":
                norm(layers, f"down_blocks.{i}.attentions.{j}.norm", ch, hw)
            skips.append(ch)
        if i < len(channels) - 1:                      # Downsample2D: 3x3 conv, stride 2, pad 1
            hw = (hw + 2 - 3) // 2 + 1
            skips.append(ch)
    resnet_block(layers, "mid_block.resnets.0", ch, ch, hw)
    norm(layers, "mid_block.attentions.0.norm", ch, hw)
    resnet_block(layers, "mid_block.resnets.1", ch, ch, hw)
    for i, (kind, out) in enumerate(zip(UNET_UP_BLOCKS, reversed(channels))):
        for j in range(UNET_LAYERS_PER_BLOCK + 1):
            resnet_block(layers, f"up_blocks.{i}.resnets.{j}", ch + skips.pop(), out, hw)
            ch = out
            if kind == "CrossAttnUpBlock2D":
                norm(layers, f"up_blocks.{i}.attentions.{j}.norm", ch, hw)
        if i < len(channels) - 1:                      # Upsample2D: nearest 2x, then 3x3 conv
            hw *= 2
    assert not skips, "every skip connection is consumed"
    norm(layers, "conv_norm_out", ch, hw)
    return layers


def sd15_unet() -> list[GNLayer]:
    return sd_unet(64)


def sd2_768_unet() -> list[GNLayer]:
    return sd_unet(96)


# Stable Diffusion VAE decoder -----------------------------------------------------------------

# AutoencoderKL config of SD 1.x/2.x: four UpDecoderBlock2D, latent_channels 4.
VAE_BLOCK_OUT_CHANNELS = (128, 256, 512, 512)
VAE_LAYERS_PER_BLOCK = 2


def sd_vae_decoder(latent: int = 64) -> list[GNLayer]:
    """diffusers Decoder: conv_in (4 -> 512), UNetMidBlock2D (resnet, Attention with a
    group_norm, resnet), UpDecoderBlock2D with layers_per_block + 1 resnets at reversed
    block_out_channels, a 2x Upsample2D after all but the last, then conv_norm_out."""
    layers: list[GNLayer] = []
    channels, hw = VAE_BLOCK_OUT_CHANNELS, latent
    ch = channels[-1]                                  # conv_in: 4 -> 512
    resnet_block(layers, "decoder.mid_block.resnets.0", ch, ch, hw)
    norm(layers, "decoder.mid_block.attentions.0.group_norm", ch, hw)
    resnet_block(layers, "decoder.mid_block.resnets.1", ch, ch, hw)
    for i, out in enumerate(reversed(channels)):
        for j in range(VAE_LAYERS_PER_BLOCK + 1):
            resnet_block(layers, f"decoder.up_blocks.{i}.resnets.{j}", ch, out, hw)
            ch = out
        if i < len(channels) - 1:
            hw *= 2
    norm(layers, "decoder.conv_norm_out", ch, hw)
    return layers


NETWORKS = {
    "resnet50_gn": resnet50_gn,
    "sd15_unet": sd15_unet,
    "sd2_768_unet": sd2_768_unet,
    "sd_vae_decoder": sd_vae_decoder,
}


# Output ---------------------------------------------------------------------------------------

def rows(network: str, n: int) -> list[tuple]:
    return [(n, layer.C, layer.H, layer.W, layer.G, layer.name) for layer in NETWORKS[network]()]


def csv_text(columns: tuple[str, ...], table: list[tuple]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(table)
    return buf.getvalue()


def generate() -> dict[str, str]:
    """File name -> CSV text, for every file this script writes."""
    files = {f"{net}_n{n}.csv": csv_text(COLUMNS, rows(net, n))
             for net in NETWORKS for n in BATCH_SIZES}
    files[ALL_FILE] = csv_text(ALL_COLUMNS, [(*row[:5], net, row[5]) for net in NETWORKS
                                             for n in BATCH_SIZES for row in rows(net, n)])
    return files


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in generate().items():
        (OUT_DIR / name).write_text(text)
    for net, build in NETWORKS.items():
        layers = build()
        shapes = {(layer.C, layer.H, layer.W) for layer in layers}
        elements = sum(layer.C * layer.H * layer.W for layer in layers)
        print(f"{net:16s} {len(layers):3d} GroupNorm layers, {len(shapes):3d} unique shapes, "
              f"{sum(layer.C for layer in layers):6d} channels, {elements / 1e6:7.2f} M elements at N=1")
    print(f"wrote {len(BATCH_SIZES) * len(NETWORKS) + 1} files to {OUT_DIR}")


if __name__ == "__main__":
    main()
