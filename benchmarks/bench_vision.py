"""Image classifiers, forward and training step: nkipy against eager and inductor.

ResNet-18, ConvNeXt-T, ViT-B/16 and EfficientNet-B0 (``vision_models.py``), float32, CPU
tensors, a small batch of small images. For each model two tables, each with a row for eager,
inductor and nkipy on every available runtime (``cpu``; ``xla`` with nkipy-runtime[xla]):

- forward: one inference call (``eval()``, ``no_grad``);
- training step: forward, cross-entropy, backward and ``AdamW.step`` (batch norms in training
  mode, so their running statistics are updated by every row).

Before timing, each compiled row is checked against eager: logits, and the first step's loss,
within 1e-3 (relative). Each row starts from the same weights.

Run: python benchmarks/bench_vision.py [--models resnet18 convnext_tiny vit_b_16 efficientnet_b0]
     [--image 64] [--batch 2] [--repeat 5] [--no-train]
"""

from __future__ import annotations

import argparse
import copy

import _timing  # first: it sets the thread count before torch starts its pools

# isort: split
import torch
import torch.nn.functional as F
from vision_models import NAMES, build

import nkipy_core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(NAMES), choices=NAMES)
    parser.add_argument("--image", type=int, default=64, help="image side, pixels")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs; the median is reported")
    parser.add_argument("--no-train", action="store_true", help="forward only")
    args = parser.parse_args()
    nkipy_core.init_nkipy_backend(runtime="cpu")
    compilers = _timing.backends()
    print(f"machine: {_timing.machine()}")
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch, 3, args.image, args.image, generator=generator)
    labels = torch.randint(0, args.classes, (args.batch,), generator=generator)

    def close(got, expected):
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)

    for name in args.models:
        torch.manual_seed(0)
        model = build(name, args.classes, args.image)
        shape = f"batch {args.batch} x 3 x {args.image} x {args.image}"

        def forward_row(compile_fn, model=model):
            fn = compile_fn(copy.deepcopy(model).eval())

            def run():
                with torch.no_grad():
                    return fn(images)

            return run, run

        _timing.measure(
            f"{name} forward, float32, {shape}",
            "ms/call",
            compilers,
            forward_row,
            close,
            args.repeat,
        )
        if args.no_train:
            continue

        def training_row(compile_fn, model=model):
            trained = copy.deepcopy(model).train()
            fn = compile_fn(trained)
            optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-4)

            def step():
                optimizer.zero_grad()
                loss = F.cross_entropy(fn(images), labels)
                loss.backward()
                optimizer.step()
                return loss.detach()

            first = copy.deepcopy(trained.state_dict())

            def first_loss():
                trained.load_state_dict(first)
                return step()

            return step, first_loss

        _timing.measure(
            f"{name} training step (forward, backward, AdamW), float32, {shape}",
            "ms/call",
            compilers,
            training_row,
            close,
            args.repeat,
        )


if __name__ == "__main__":
    main()
