"""What a script's per-sample function does to an image, told from what it returns: the Keras
preprocessing layers that do the same on the device (tune's `augment_in_model`, issue 60).

The function is called again TRIES times on an input it was given during training. Each output
must be the input flipped (left-right, up-down), then cropped or shifted by whole pixels (a shift
fills what it uncovers with one constant), its values scaled by one a*x + b for every call (a
`/ 255`, a normalisation). An output that is anything else (a rotation, a zoom, a random
brightness, noise) is not explained, and nothing is moved: the function's lines are named instead.
Geometry is matched on one standardised channel (so a*x + b does not hide it), then checked on
every pixel and channel. Only numpy is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

# Calls of the function whose outputs are explained: a flip drawn with p = 0.1 stays unseen in 48
# calls with probability 0.9**48 = 0.6%, and a 50% flip is told from a fixed one.
TRIES = 48
PATCH_PX = 6  # the side of the grey patch located in the input
Z_MATCH = 1e-3  # standardised values of a patch and a window that are the same pixels
RELATIVE_RESIDUAL = 1e-4  # of the output's range: float32 rounding of a*x + b
SIMPLEST_DENOMINATOR = 1000  # 1 / 255, 2 / 255, a mean of 0.5
LARGEST_PX = 1024 * 1024
# The images of a batch a batch-wise function is checked on, per call (each its own search)
BATCH_SAMPLES = 8  # larger images are not searched (the windows' memory)
# A flip seen k of TRIES times is taken for RandomFlip's 50% unless a fair coin would give k with
# probability under this (two-sided): 14 to 34 of 48 pass
FLIP_P_VALUE = 0.001


@dataclass(frozen=True)
class Seen:
    """One output explained: y[r, c] = scale * flip(x)[r + dy, c + dx] + offset where that lies in
    the input, `fill` elsewhere (None: nothing was uncovered, or it is the image's own pixels
    mirrored at its edges: `mode`); scale, offset and fill per channel."""

    flip_h: bool
    flip_v: bool
    dy: int
    dx: int
    scale: tuple[float, ...]
    offset: tuple[float, ...]
    fill: tuple[float, ...] | None
    shape: tuple[int, ...]
    # what a shift uncovered: one value ("constant"), or the image mirrored at its edges, as
    # numpy's np.pad(mode=...) and tf.pad name them: "reflect" leaves the edge pixel out (the
    # CIFAR crop of torchvision's and Keras' examples), "symmetric" repeats it
    mode: str = "constant"


@dataclass(frozen=True)
class Layer:
    """A Keras layer as keras.layers.<name>(*args, **kwargs): built in the child, written in the
    patch (record.watch.AugmentLayer.code)."""

    name: str
    args: tuple
    kwargs: dict


def simplest(value: float) -> float:
    """`value` as the simplest fraction within float32's rounding of it: 2 / 255 computed in
    float32 reads 0.0078431374, the scale written is 2 / 255."""
    fraction = Fraction(value).limit_denominator(SIMPLEST_DENOMINATOR)
    return float(fraction) if math.isclose(float(fraction), value, rel_tol=1e-6, abs_tol=1e-7) else value


class Locator:
    """The image `x` in its four flips, with every window's mean and spread of one channel's values
    (integral images: one pass each), kept across the outputs of one function."""

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        # located on one channel, the most varied: a normalisation per channel is one a*x + b there
        self.channel = int(np.argmax(x.reshape(-1, x.shape[2]).var(axis=0)))
        self.flips: dict[tuple[bool, bool, int], tuple] = {}

    def flipped(self, flip_h: bool, flip_v: bool, side: int) -> tuple:
        key = (flip_h, flip_v, side)
        if key not in self.flips:
            image = self.x.astype(np.float64)[:: -1 if flip_v else 1, :: -1 if flip_h else 1]
            grey = image[..., self.channel]
            mean, std = _window_stats(grey, side)
            self.flips[key] = image, grey, mean, std
        return self.flips[key]


def _window_stats(grey: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean and standard deviation of every side x side window, from integral images."""

    def sums(a):
        s = np.pad(a, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
        return s[side:, side:] - s[:-side, side:] - s[side:, :-side] + s[:-side, :-side]

    n = side * side
    mean = sums(grey) / n
    std = np.sqrt(np.maximum(sums(grey * grey) / n - mean * mean, 0))
    return mean, std


def explain(x: np.ndarray, y, locator: Locator | None = None) -> Seen | None:
    """How `y` was made from the image `x` (height, width, channels), or None."""
    if not isinstance(y, np.ndarray) or y.ndim != 3 or x.ndim != 3 or y.shape[2] != x.shape[2]:
        return None
    (height, width), (h, w) = x.shape[:2], y.shape[:2]
    if h > height or w > width or height * width > LARGEST_PX or y.dtype.kind not in "uif" or x.dtype.kind not in "uif":
        return None
    locator = locator or Locator(x)
    yf = y.astype(np.float64)
    grey = yf[..., locator.channel]
    side = min(PATCH_PX, h, w)
    # patches of a 5 x 5 grid over the output, tried in turn, the inner ones first (a patch across
    # what a shift uncovered is nowhere in the input), each the most varied first; a flat one
    # locates nothing
    grid_r, grid_c = (np.linspace(0, n - side, 5).astype(int) for n in (h, w))
    patches = sorted(
        (
            (i in (0, 4) or j in (0, 4), -grey[r : r + side, c : c + side].std(), int(r), int(c))
            for i, r in enumerate(grid_r)
            for j, c in enumerate(grid_c)
        )
    )
    for _, spread, top, left in patches:
        if spread == 0:
            continue
        patch = grey[top : top + side, left : left + side]
        patch = (patch - patch.mean()) / patch.std()
        for flip_h in (False, True):
            for flip_v in (False, True):
                image, flat, mean, std = locator.flipped(flip_h, flip_v, side)
                # windows whose corners and centre standardise to the patch's, then every pixel
                rows, cols = mean.shape
                near = std > 0
                for a, b in ((0, 0), (side - 1, side - 1), (side // 2, side // 2), (0, side - 1)):
                    with np.errstate(divide="ignore", invalid="ignore"):
                        z = (flat[a : a + rows, b : b + cols] - mean) / std
                    near &= np.abs(z - patch[a, b]) < Z_MATCH
                for i, j in zip(*np.nonzero(near)):
                    seen = _checked(image, yf, int(i) - top, int(j) - left, flip_h, flip_v)
                    if seen is not None:
                        return seen
    return None


def _checked(flipped: np.ndarray, y: np.ndarray, dy: int, dx: int, flip_h: bool, flip_v: bool) -> Seen | None:
    """`y` against `flipped` moved by (dy, dx) on every pixel and channel: one a*x + b where they
    overlap, one constant where the shift uncovered the image."""
    (height, width), (h, w) = flipped.shape[:2], y.shape[:2]
    r0, r1, c0, c1 = max(0, -dy), min(h, height - dy), max(0, -dx), min(w, width - dx)
    if r1 - r0 < 2 or c1 - c0 < 2:
        return None
    source = flipped[r0 + dy : r1 + dy, c0 + dx : c1 + dx].reshape(-1, flipped.shape[2])
    target = y[r0:r1, c0:c1].reshape(-1, y.shape[2])
    spread = source.var(axis=0)
    if (spread == 0).any():
        return None
    # per channel: one a*x + b for all (a / 255) or one each (a normalisation by the data's mean and spread)
    scale = ((source - source.mean(axis=0)) * (target - target.mean(axis=0))).mean(axis=0) / spread
    offset = target.mean(axis=0) - scale * source.mean(axis=0)
    if (scale <= 0).any():
        return None
    tolerance = RELATIVE_RESIDUAL * max(float(np.ptp(target)), 1e-12)
    if np.abs(scale * source + offset - target).max() > tolerance:
        return None
    uncovered = np.ones((h, w), dtype=bool)
    uncovered[r0:r1, c0:c1] = False
    fill = None
    if uncovered.any():
        if (h, w) != (height, width):  # a crop that also uncovered: not one layer
            return None
        outside = y[uncovered]  # (pixels, channels)
        if np.ptp(outside, axis=0).max() > tolerance:
            mode = _mirrored(flipped, y, dy, dx, scale, offset, tolerance)
            if mode is None:
                return None  # repeated edges, a wrap, noise: no one layer's fill
            return Seen(
                flip_h, flip_v, dy, dx, tuple(map(float, scale)), tuple(map(float, offset)), None, tuple(y.shape), mode
            )
        fill = tuple(float(v) for v in outside[0])
    return Seen(
        flip_h, flip_v, dy, dx, tuple(float(v) for v in scale), tuple(float(v) for v in offset), fill, tuple(y.shape)
    )


def _mirrored(flipped: np.ndarray, y: np.ndarray, dy: int, dx: int, scale, offset, tolerance: float) -> str | None:
    """Whether the whole of `y` is `flipped` padded by its mirror image (|dy| rows, |dx| columns,
    the edge pixel left out or repeated) and moved by (dy, dx): the mode, or None."""
    pad = ((abs(dy), abs(dy)), (abs(dx), abs(dx)), (0, 0))
    h, w = y.shape[:2]
    if abs(dy) >= flipped.shape[0] or abs(dx) >= flipped.shape[1]:
        return None  # a mirror of more rows than the image has
    for mode in ("reflect", "symmetric"):
        padded = np.pad(flipped, pad, mode=mode)
        window = padded[abs(dy) + dy : abs(dy) + dy + h, abs(dx) + dx : abs(dx) + dx + w]
        if window.shape == y.shape and np.abs(scale * window + offset - y).max() <= tolerance:
            return mode
    return None


def layers_for(x: np.ndarray, seen: list[Seen], out_dtype: str) -> list[Layer] | str:
    """The layers that draw what `seen` shows, in the order they are applied (values first, then
    the flips, then the crop or shift, whose fill is then in the output's units), or why none do."""
    first = seen[0]
    if any(s.shape != first.shape for s in seen):
        return "its outputs have different sizes"
    if len(set(seen)) == 1 and (first.flip_h or first.flip_v or first.dy or first.dx) and first.shape == x.shape:
        return (
            "it made the same changed output every call (a fixed change, or seeded by its arguments): a layer "
            "would draw new randomness"
        )
    if any(not _close(s.scale, first.scale) or not _close(s.offset, first.offset) for s in seen):
        return "its values change from call to call (a random brightness or contrast)"
    values = _values(first.scale, first.offset, out_dtype != str(x.dtype))
    geometry = []
    flips = []
    for axis, count in (("horizontal", sum(s.flip_h for s in seen)), ("vertical", sum(s.flip_v for s in seen))):
        if count == len(seen):
            return f"it flips every image ({axis}): not a random flip"
        if count and _two_sided(count, len(seen)) < FLIP_P_VALUE:
            return f"it flips {count} of {len(seen)} images ({axis}); RandomFlip flips half"
        if count:
            flips.append(axis)
    if flips:
        geometry.append(Layer("RandomFlip", ("horizontal_and_vertical" if len(flips) == 2 else flips[0],), {}))
    height, width = x.shape[:2]
    h, w = first.shape[:2]
    values_first = True
    if (h, w) != (height, width):
        if len({(s.dy, s.dx) for s in seen}) == 1 and (
            abs(2 * first.dy - (height - h)) <= 1 and abs(2 * first.dx - (width - w)) <= 1
        ):
            geometry.append(Layer("CenterCrop", (h, w), {}))
        elif len({(s.dy, s.dx) for s in seen}) == 1:
            return f"it crops {h}x{w} at one place off the centre"
        else:
            # a crop at a random place in each image: gpuscout's RandomCropEach (child/fixes.py). Keras'
            # RandomCrop draws one place per batch (3.15's get_random_transformation), and it and
            # RandomTranslation set supports_jit = False, which turns XLA off for the whole model
            geometry.append(Layer("RandomCropEach", (h, w), {}))
    else:
        fills = {s.fill for s in seen if s.fill is not None}
        modes = {s.mode for s in seen if s.fill is not None or s.mode != "constant"}
        if len(fills) > 1:
            return "what a shift uncovers is filled with different values"
        if len(modes) > 1:
            return f"what a shift uncovers is filled in different ways ({', '.join(sorted(modes))})"
        most_dy, most_dx = max(abs(s.dy) for s in seen), max(abs(s.dx) for s in seen)
        mode = modes.pop() if modes else "constant"
        if (most_dy or most_dx) and mode != "constant":
            # the image mirrored at its edges, then cropped back to its size: the same geometry, the
            # fill the image's own pixels (before or after the values: mirroring commutes with a*x + b)
            geometry.append(
                Layer(
                    "RandomCropEach", (height, width), {"pad_height": most_dy, "pad_width": most_dx, "fill_mode": mode}
                )
            )
        elif most_dy or most_dx:
            fill = fills.pop() if fills else (0.0,)
            # one fill value: in the output's units (the shift after the values) or in the input's
            # (a pad before the normalisation: the shift before it)
            given = [(f - b) / a for f, a, b in zip(fill, first.scale, first.offset)] if len(fill) > 1 else list(fill)
            # float32's rounding of the output, in the input's units: a thousandth of a pixel level of 255
            input_tolerance = 1e-5 * max(float(np.ptp(x)), 1.0)
            if _close(fill, (fill[0],) * len(fill)):
                value = fill[0]
            elif max(given) - min(given) <= input_tolerance:
                value, values_first = round(given[0] / input_tolerance) * input_tolerance, False
            else:
                return "what a shift uncovers is filled with a different value in each channel"
            # a shift of up to (dy, dx) pixels: a border that wide, then the image's size cropped from it
            geometry.append(
                Layer(
                    "RandomCropEach",
                    (height, width),
                    {"pad_height": most_dy, "pad_width": most_dx, "fill_value": float(simplest(value))},
                )
            )
    layers = values + geometry if values_first else geometry + values
    if not layers:
        return "it returned its input unchanged"
    return layers


def identify_batches(batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[Layer] | str, int]:
    """The layers for what made each batch's images (`out`) from the images it read (`read`), as
    `identify` tells a function called again, for batches of different images (a generator's
    successive batches): each batch's first BATCH_SAMPLES images against their own, until TRIES."""
    seen: list[Seen] = []
    calls: list[list[Seen]] = []
    out_dtype = ""
    for read, out in batches:
        call = []
        for image, made in zip(read[:BATCH_SAMPLES], out[:BATCH_SAMPLES]):
            explained = explain(image, made)
            if explained is None:
                return (
                    f"an image it made (shape {tuple(out.shape)}) is not a flip, crop, shift or rescale of the one "
                    f"it read {tuple(read.shape)} (a rotation, zoom, colour change or noise?)"
                ), len(seen)
            call.append(explained)
        seen += call
        calls.append(call)
        out_dtype = str(out.dtype)
        if len(seen) >= TRIES:
            break
    if not seen:
        return "it made no images", 0
    why = _one_draw_a_batch(calls)
    if why:
        return why, len(seen)
    return layers_for(batches[0][0][0], seen, out_dtype), len(seen)


def as_record(layers: list[Layer] | str) -> dict:
    """What `identify` told, as the record holds it (record.watch.AugmentLayer's fields, or why none)."""
    if isinstance(layers, str):
        return {"why_not": layers}
    return {"layers": [{"name": layer.name, "args": list(layer.args), "kwargs": layer.kwargs} for layer in layers]}


def _close(a, b) -> bool:
    return all(math.isclose(u, v, rel_tol=1e-5, abs_tol=1e-7) for u, v in zip(a, b))


def _values(scale: tuple[float, ...], offset: tuple[float, ...], cast: bool) -> list[Layer]:
    """The layer for y = a*x + b: Rescaling where one a and b hold for every channel, else a
    Normalization by the mean and variance they stand for ((x - mean) / sqrt(variance)); a
    Rescaling(1.0) where only the dtype changed (the cast)."""
    if _close(scale, (scale[0],) * len(scale)) and _close(offset, (offset[0],) * len(offset)):
        a, b = simplest(scale[0]), simplest(offset[0])
        if a == 1 and b == 0 and not cast:
            return []
        return [Layer("Rescaling", (a,), {"offset": b} if b else {})]
    mean = [float(f"{-b / a:.6g}") for a, b in zip(scale, offset)]
    variance = [float(f"{1 / (a * a):.6g}") for a in scale]
    return [Layer("Normalization", (), {"mean": mean, "variance": variance})]


def _two_sided(k: int, n: int) -> float:
    """P(a fair coin's count over n is as far from n/2 as k)."""
    far = abs(k - n / 2)
    return min(1.0, sum(math.comb(n, i) for i in range(n + 1) if abs(i - n / 2) >= far) / 2**n)


def identify(call_again, x: np.ndarray) -> tuple[list[Layer] | str, int]:
    """The layers for a function, called again by `call_again()` on `x`, and how many outputs were
    explained before the first that was not. `x` is one image (height, width, channels), the
    function called TRIES times; or a batch of them (an `augment_batch(images)`), each output's
    first BATCH_SAMPLES images against the input's, in as many calls as make TRIES images (two
    at least: a batch drawn once could be one seeded draw)."""
    batched = x.ndim == 4
    images = list(x[:BATCH_SAMPLES]) if batched else [x]
    locators = [Locator(image) for image in images]
    seen: list[Seen] = []
    out_dtype = None
    for _ in range(max(2, math.ceil(TRIES / len(images))) if batched else TRIES):
        y = call_again()
        y = np.asarray(y) if hasattr(y, "__array__") else y
        outputs = (
            list(y[: len(images)])
            if batched and getattr(y, "ndim", 0) == 4 and len(y) == len(x)
            else [None] * len(images)
            if batched
            else [y]
        )
        for image, output, locator in zip(images, outputs, locators):
            explained = explain(image, output, locator)
            if explained is None:
                kind = f"a {type(y).__name__}" if not hasattr(y, "shape") else f"shape {tuple(y.shape)}"
                return (
                    f"an output ({kind}) is not a flip, crop, shift or rescale of its input {tuple(x.shape)} "
                    "(a rotation, zoom, colour change or noise?)"
                ), len(seen)
            seen.append(explained)
        out_dtype = str(y.dtype)
    if batched and len(images) > 1:
        why = _one_draw_a_batch([seen[i : i + len(images)] for i in range(0, len(seen), len(images))])
        if why:
            return why, len(seen)
    return layers_for(images[0], seen, out_dtype), len(seen)


def _one_draw_a_batch(calls: list[list[Seen]]) -> str | None:
    """Why no layer draws what these batches show, where each batch's images were all flipped, or
    all cropped or shifted, alike while batches differ (one draw a batch, not one an image)."""
    seen = [s for call in calls for s in call]
    for what, key in (("flip", lambda s: (s.flip_h, s.flip_v)), ("crop or shift", lambda s: (s.dy, s.dx))):
        if len({key(s) for s in seen}) > 1 and all(len({key(s) for s in call}) == 1 for call in calls):
            return f"it draws one {what} for the whole batch, not one per image as the layers would"
    return None
