"""child/augment_match.py: a per-sample function told as Keras layers from what it returns, and
refused where no layer does the same. The layers told are then run in Keras (jax, CPU) on the same
image: each of their outputs must be explained the same way, and the flips drawn as often."""

import itertools
import os

import numpy as np
import pytest

from gpuscout.child.augment_match import TRIES, Layer, Seen, explain, identify, layers_for
from gpuscout.record.augment import AugmentLayer

RNG = np.random.default_rng(0)
IMAGE = RNG.integers(0, 256, (40, 40, 3), dtype=np.uint8)


@pytest.fixture(autouse=True)
def same_draws():
    """Each test draws the same random numbers whichever tests ran before it in its worker."""
    RNG.bit_generator.state = np.random.default_rng(1).bit_generator.state


def pad_shift_flip(image, rng=RNG):
    top, left = rng.integers(0, 9, 2)
    out = np.pad(image, ((4, 4), (4, 4), (0, 0)))[top : top + 40, left : left + 40]
    return (out[:, ::-1] if rng.random() < 0.5 else out).astype("float32") / 255.0


def crop_flip_normalise(image, rng=RNG):
    top, left = rng.integers(0, 9, 2)
    out = image[top : top + 32, left : left + 32]
    return (out[::-1] if rng.random() < 0.5 else out).astype("float32") / 127.5 - 1.0


def names(layers):
    return [(layer.name, layer.args) for layer in layers]


def test_a_shift_a_flip_and_a_scale_are_told_as_the_layers_that_draw_them():
    layers, explained = identify(lambda: pad_shift_flip(IMAGE.copy()), IMAGE)
    assert explained == TRIES
    # a shift of up to 4 pixels: a border of 4 black pixels, the image's size cropped from it per image
    assert names(layers) == [("Rescaling", (1 / 255,)), ("RandomFlip", ("horizontal",)), ("RandomCropEach", (40, 40))]
    assert layers[2].kwargs == {"pad_height": 4, "pad_width": 4, "fill_value": 0.0}
    # written as a user writes it (the patch's line)
    assert AugmentLayer(name="Rescaling", args=[1 / 255]).code() == "keras.layers.Rescaling(1 / 255)"
    # a crop at a random place per image: gpuscout's RandomCropEach (Keras' RandomCrop draws one place
    # per batch and turns XLA off); a normalisation to [-1, 1] is a scale and an offset
    layers, _ = identify(lambda: crop_flip_normalise(IMAGE.copy()), IMAGE)
    assert names(layers) == [("Rescaling", (2 / 255,)), ("RandomFlip", ("vertical",)), ("RandomCropEach", (32, 32))]
    assert layers[0].kwargs == {"offset": -1.0}
    # a fixed centre crop is one layer, and a dtype change alone a Rescaling(1.0) (the cast)
    layers, _ = identify(lambda: IMAGE[4:36, 4:36].astype("float32"), IMAGE)
    assert names(layers) == [("Rescaling", (1.0,)), ("CenterCrop", (32, 32))]


MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # ImageNet's, as scripts write them


@pytest.mark.parametrize("mode", ["reflect", "symmetric"])
def test_the_cifar_crop_of_a_mirrored_border_is_told_with_its_mode(mode):
    """np.pad(mode="reflect") then a random crop of the image's size (the CIFAR recipe): the border
    is the image's own pixels, told by how it mirrors them (the edge left out, or repeated), and a
    border that repeats the edge pixel (mode="edge", no such pad on every backend) is refused."""

    def mirrored(image, rng=RNG, how=mode):
        top, left = rng.integers(0, 9, 2)
        out = np.pad(image, ((4, 4), (4, 4), (0, 0)), mode=how)[top : top + 40, left : left + 40]
        return (out[:, ::-1] if rng.random() < 0.5 else out).astype("float32") / 255.0

    layers, explained = identify(lambda: mirrored(IMAGE), IMAGE)
    assert explained == TRIES
    assert names(layers) == [("Rescaling", (1 / 255,)), ("RandomFlip", ("horizontal",)), ("RandomCropEach", (40, 40))]
    assert layers[2].kwargs == {"pad_height": 4, "pad_width": 4, "fill_mode": mode}
    refused, _ = identify(lambda: mirrored(IMAGE, how="edge"), IMAGE)
    assert isinstance(refused, str) and "not a flip, crop, shift or rescale" in refused
    # the layer draws the same: its outputs explained as the same mode, one place per image
    os.environ.setdefault("KERAS_BACKEND", "jax")
    pytest.importorskip("keras")
    from gpuscout.child.fixes import RandomCropEach

    layer = RandomCropEach(40, 40, pad_height=4, pad_width=4, fill_mode=mode)
    outputs = np.asarray(layer(np.repeat(IMAGE[None].astype("float32"), 48, axis=0), training=True))
    seen = [explain(IMAGE, out) for out in outputs]
    assert all(s is not None for s in seen) and {s.mode for s in seen if s.dy or s.dx} == {mode}
    assert len({(s.dy, s.dx) for s in seen}) > 10


def test_a_normalisation_per_channel_is_told_as_keras_normalization():
    """ImageNet's mean and spread per channel: one a*x + b each, a Normalization by the mean and
    variance they stand for, in pixel units; a pad before it fills with 0 in the input's units, so
    the shift goes before the normalisation."""

    def crop_normalise(image, rng=RNG):
        top, left = rng.integers(0, 9, 2)
        out = image[top : top + 32, left : left + 32]
        out = out[:, ::-1] if rng.random() < 0.5 else out
        return ((out / 255.0 - MEAN) / STD).astype("float32")

    layers, _ = identify(lambda: crop_normalise(IMAGE), IMAGE)
    assert [layer.name for layer in layers] == ["Normalization", "RandomFlip", "RandomCropEach"]
    assert layers[0].kwargs == {"mean": [123.675, 116.28, 103.53], "variance": [3409.98, 3262.69, 3291.89]}

    def pad_then_normalise(image, rng=RNG):
        top, left = rng.integers(0, 9, 2)
        out = np.pad(image, ((4, 4), (4, 4), (0, 0)))[top : top + 40, left : left + 40]
        return ((out / 255.0 - MEAN) / STD).astype("float32")

    layers, _ = identify(lambda: pad_then_normalise(IMAGE), IMAGE)
    assert [layer.name for layer in layers] == ["RandomCropEach", "Normalization"]
    assert layers[0].kwargs == {"pad_height": 4, "pad_width": 4, "fill_value": 0.0}


@pytest.mark.parametrize(
    "function, why",
    [
        (lambda: np.clip(IMAGE * RNG.uniform(0.8, 1.2), 0, 255), "not a flip, crop, shift or rescale"),
        (lambda: np.rot90(IMAGE, RNG.integers(1, 4)).copy(), "not a flip, crop, shift or rescale"),
        (lambda: IMAGE[:, ::-1] / 255.0, "same changed output every call"),
        (lambda: IMAGE[:, ::-1] if RNG.random() < 0.1 else IMAGE, "RandomFlip flips half"),
        (lambda: IMAGE[2:34, 0:32], "at one place off the centre"),
        (lambda: IMAGE.copy(), "returned its input unchanged"),
        (lambda: IMAGE + RNG.normal(0, 1, IMAGE.shape), "not a flip, crop, shift or rescale"),
    ],
)
def test_what_no_layer_does_the_same_is_refused_with_its_reason(function, why):
    layers, _ = identify(function, IMAGE)
    assert isinstance(layers, str) and why in layers, layers


def test_each_output_is_checked_on_every_pixel():
    shifted = pad_shift_flip(IMAGE)
    seen = explain(IMAGE, shifted)
    assert seen is not None and seen.scale == pytest.approx((1 / 255,) * 3)
    broken = shifted.copy()
    broken[20, 20, 1] += 0.01  # one value of one channel
    assert explain(IMAGE, broken) is None
    assert explain(IMAGE, shifted[..., :2]) is None  # a channel dropped
    # outputs from one seeded call every time: a layer would draw new randomness
    fixed = Seen(True, False, 1, 2, (1 / 255,) * 3, (0.0,) * 3, (0.0,) * 3, IMAGE.shape)
    assert "same changed output every call" in layers_for(IMAGE, [fixed] * 5, "float32")


def test_the_layers_told_draw_what_the_function_drew():
    """The layers told, run by Keras on the image in training mode, make outputs explained as the
    same kinds of change, each within the function's range, the flips about half the time, a place
    per image; a model behind them keeps XLA on (Keras' RandomCrop and RandomTranslation turn it off)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    keras = pytest.importorskip("keras")
    from gpuscout.child import fixes

    for function in (pad_shift_flip, crop_flip_normalise):
        told, _ = identify(lambda function=function: function(IMAGE.copy()), IMAGE)
        made = [(getattr(keras.layers, t.name, None) or getattr(fixes, t.name))(*t.args, **t.kwargs) for t in told]
        model = keras.Sequential([keras.Input(IMAGE.shape), *made])
        outputs = np.asarray(model(np.repeat(IMAGE[None], 96, axis=0), training=True))
        seen = [explain(IMAGE, out.astype("float32")) for out in outputs]
        assert all(s is not None for s in seen)
        assert told == layers_for(IMAGE, seen, "float32")  # told again from Keras' own outputs: the same layers
        flips = sum(s.flip_h or s.flip_v for s in seen)
        assert 30 <= flips <= 66  # 96 fair coins: outside this, p < 0.001
        assert max(max(abs(s.dy), abs(s.dx)) for s in seen) <= 8 and len({(s.dy, s.dx) for s in seen}) > 10
        trained = keras.Sequential([keras.Input(IMAGE.shape), *made, keras.layers.Flatten(), keras.layers.Dense(1)])
        trained.compile("sgd", "mse", jit_compile=True)
        assert trained.jit_compile
    assert not any(isinstance(t, Layer) and t.name in ("RandomCrop", "RandomTranslation") for t in told)


def test_a_function_of_the_whole_batch_is_told_image_by_image():
    """augment_batch(images): each output image against its input image, a flip drawn per image."""
    batch = RNG.integers(0, 256, (16, 40, 40, 3), dtype=np.uint8)

    rng = np.random.default_rng(4)

    def augment_batch(images):
        flips = rng.random(len(images)) < 0.5
        return np.where(flips[:, None, None, None], images[:, :, ::-1], images).astype("float32") / 255

    layers, explained = identify(lambda: augment_batch(batch.copy()), batch)
    assert names(layers) == [("Rescaling", (1 / 255,)), ("RandomFlip", ("horizontal",))] and explained == TRIES
    # one flip for the whole batch is not a flip per image: each image's own coin is what RandomFlip draws
    calls = itertools.count()  # every other call flipped: both kinds of call are seen, whatever the seed
    layers, _ = identify(lambda: batch[:, :, ::-1] if next(calls) % 2 else batch, batch)
    assert layers == "it draws one flip for the whole batch, not one per image as the layers would"
    # a batch returned in another order (a shuffle) is not explained image by image
    layers, _ = identify(lambda: batch[::-1].copy(), batch)
    assert "not a flip, crop, shift or rescale" in layers
