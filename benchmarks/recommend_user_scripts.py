"""Three training scripts as users write them, one per bottleneck, for `recommend --from RUN`'s
check on the lent GPUs (benchmarks/recommend_from_run.py watches each on an H100 and an H200):

    python recommend_user_scripts.py gpu     # a small transformer in bf16, token ids in memory: GPU-bound
    python recommend_user_scripts.py input   # a CNN fed by a one-worker PyDataset doing per-image work
    python recommend_user_scripts.py host    # a deep MLP run op by op (jit_compile=False): host-bound

Each trains "for a long time" (1000 epochs) unless `--epochs N`; gpuscout watch --duration stops
it. `--lr` sets the optimizer's learning rate (a sweep's parameter).
"""

import argparse

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["gpu", "input", "host"])
parser.add_argument("--epochs", type=int, default=1000)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--small", action="store_true", help="a CPU smoke test of the same code")
args = parser.parse_args()
mode, small, epochs = args.mode, args.small, args.epochs
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)

if mode == "gpu":
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    seq, width, depth, vocab, batch = (64, 64, 2, 1000, 8) if small else (512, 1024, 6, 32000, 32)
    tokens = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(vocab, width)(tokens)
    for _ in range(depth):
        h = keras.layers.LayerNormalization()(x)
        x = x + keras.layers.MultiHeadAttention(num_heads=max(1, width // 64), key_dim=64)(h, h)
        h = keras.layers.LayerNormalization()(x)
        x = x + keras.layers.Dense(width)(keras.layers.Dense(4 * width, activation="gelu")(h))
    logits = keras.layers.Dense(10, dtype="float32")(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model(tokens, logits)
    model.compile(
        optimizer=keras.optimizers.AdamW(args.lr), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    x_train = rng.integers(0, vocab, (batch * 64, seq), dtype=np.int32)
    y_train = rng.integers(0, 10, batch * 64)
    model.fit(x_train, y_train, batch_size=batch, epochs=epochs, verbose=0)

elif mode == "input":
    side, batch = (32, 16) if small else (96, 64)

    class Images(keras.utils.PyDataset):
        """Decoding and augmenting each image in Python, one worker thread: what many scripts do."""

        def __init__(self):
            super().__init__(workers=1, use_multiprocessing=False)

        def __len__(self):
            return 100

        def __getitem__(self, index):
            r = np.random.default_rng(index)
            images = []
            for _ in range(batch):
                image = r.random((side + side // 3, side + side // 3, 3), dtype=np.float32)  # "decode"
                if r.random() < 0.5:
                    image = image[:, ::-1]
                image = np.clip(image * r.uniform(0.8, 1.2) + r.uniform(-0.1, 0.1), 0.0, 1.0)
                top, left = r.integers(0, side // 3, 2)
                images.append(image[top : top + side, left : left + side])
            return np.stack(images), r.integers(0, 10, batch)

    model = keras.Sequential(
        [keras.Input((side, side, 3))]
        + [
            layer
            for filters in (32, 64, 128)
            for layer in (
                keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
                keras.layers.MaxPooling2D(),
            )
        ]
        + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(args.lr), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.fit(Images(), epochs=epochs, verbose=0)

elif mode == "host":
    width, depth, batch = (64, 4, 32) if small else (512, 24, 256)
    model = keras.Sequential(
        [keras.Input((width,))]
        + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
        + [keras.layers.Dense(10)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(args.lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    x_train = rng.random((batch * 50, width), dtype=np.float32)
    y_train = rng.integers(0, 10, batch * 50)
    model.fit(x_train, y_train, batch_size=batch, epochs=epochs, verbose=0)
