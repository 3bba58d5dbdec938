"""The convolution shapes of the cuDNN bar (N = 32, bf16): the layers whose cuDNN times on the
lent H100 are the reference every kernel is judged against."""

ANCHORS = [
    ("resnet50 stage2 3x3", dict(C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)),
    ("resnet50 stage3 1x1", dict(C=1024, K=256, G=1, H=14, W=14, R=1, S=1)),
    ("resnext50 stage2 g32", dict(C=256, K=256, G=32, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)),
    ("resnext50 stage4 g32", dict(C=1024, K=1024, G=32, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1)),
    ("mobilenetv2 dw 144", dict(C=144, K=144, G=144, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1)),
    ("mobilenetv2 dw 960", dict(C=960, K=960, G=960, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1)),
    ("efficientnet dw 5x5", dict(C=240, K=240, G=240, H=28, W=28, R=5, S=5, pad_h=2, pad_w=2)),
    ("convnext dw 7x7", dict(C=96, K=96, G=96, H=56, W=56, R=7, S=7, pad_h=3, pad_w=3)),
    ("regnet gw8", dict(C=224, K=224, G=28, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)),
]
