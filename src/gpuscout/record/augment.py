"""The augmentation an input does on the host, as a watched record keeps it: where a PyDataset's
`__getitem__` spends its time (its lines, the script's function it calls per sample), what its
own loop or a tf.data map does to each image, and the Keras layers that do the same on the
device (child/augment_match.py tells them; tune's augment changes move them)."""

from __future__ import annotations

from fractions import Fraction

from pydantic import Field

from gpuscout.record.child import Part

# Layers of gpuscout's own (child/fixes.py) that the augmentation is told as, where Keras' own would
# turn XLA off or draw one place per batch
OWN_LAYERS = ("RandomCropEach",)


class AugmentLayer(Part):
    """A Keras preprocessing layer, keras.layers.<name>(*args, **kwargs) (child/augment_match.py)."""

    name: str
    args: list = Field(default_factory=list)
    kwargs: dict = Field(default_factory=dict)

    def code(self) -> str:
        parts = [_literal(a) for a in self.args] + [f"{k}={_literal(v)}" for k, v in self.kwargs.items()]
        return f"{'' if self.own else 'keras.layers.'}{self.name}({', '.join(parts)})"

    @property
    def own(self) -> bool:
        """gpuscout's layer (child/fixes.py), whose definition goes with it, not one of Keras'."""
        return self.name in OWN_LAYERS


def behind_layers(model: str, input_shape: list[int] | None, layers: list[AugmentLayer]) -> str:
    """The line that puts `model` behind the augmentation's layers: what the patches and the
    verdicts write before the script's compile."""
    told = ", ".join(layer.code() for layer in layers)
    return f"{model} = keras.Sequential([keras.Input(shape={tuple(input_shape or ())}), {told}, {model}])"


def _literal(value) -> str:
    """A number as a user writes it: 1 / 255 where the scale is that fraction exactly."""
    if isinstance(value, float) and len(repr(value)) > 8:  # 0.125 as it is, 0.00392156862745098 as 1 / 255
        fraction = Fraction(value).limit_denominator(1000)
        if float(fraction) == value and fraction.denominator > 1:
            return f"{fraction.numerator} / {fraction.denominator}"
        return repr(round(value, 6))
    return repr(value)


class MapAugment(Part):
    """What a tf.data map of the script's does to the image of each element, told as the Keras
    layers that do the same on the device (child/map_augment.py), or why it cannot move."""

    function: str | None = None  # its qualified name: augment, Pipeline.augment, <lambda>
    input_shape: list[int] | None = None  # one image as the map is given it
    input_dtype: str | None = None
    batched: bool = False  # the map comes after batch(): it is given a batch of images
    explained: int | None = None  # outputs told as flips, crops, shifts and rescales
    layers: list[AugmentLayer] = Field(default_factory=list)
    why_not: str | None = None


# A function taking at least this share of a PyDataset's __getitem__ time is its work (the child's
# child/sample_work.py tells only such a function as layers: the same figure)
SAMPLE_WORK_SHARE = 0.3


class SampleFunction(Part):
    """The script's function a PyDataset's `__getitem__` spends the most time in (an augment(image)),
    and whether it can be moved into the model: the layers that do what it does, or why not."""

    name: str  # its qualified name: augment, Decoded.augment
    file: str
    line: int  # its def
    call_line: int | None = None  # the __getitem__ line that calls it
    share: float  # of __getitem__'s time, inclusive
    calls_per_batch: float
    owner: str | None = None  # "Class.name" where it is a method of the PyDataset; None: a module's function
    argument: str | None = None  # the image it is given
    input_shape: list[int] | None = None
    input_dtype: str | None = None
    explained: int | None = None  # outputs told as flips, crops, shifts and rescales
    layers: list[AugmentLayer] = Field(default_factory=list)
    why_not: str | None = None


class InlineAugment(Part):
    """The augmentation a PyDataset's `__getitem__` does in its own lines (child/inline_augment.py):
    the array it reads its images from and the indices it reads them by, the statements that make
    them (its file's lines, left out where the images are handed as read), and the layers that do
    what those lines did; or why it cannot be moved."""

    file: str | None = None
    line: int | None = None  # __getitem__'s def
    end_line: int | None = None
    images: str | None = None  # the array it reads them from, as its source names it: self.x, IMAGES
    indices: str | None = None  # source text: idx, or i * self.batch_size : (i + 1) * self.batch_size
    removed: list[list[int]] = Field(default_factory=list)  # [first, last] lines of each statement left out
    input_shape: list[int] | None = None
    input_dtype: str | None = None
    explained: int | None = None  # outputs told as flips, crops, shifts and rescales
    layers: list[AugmentLayer] = Field(default_factory=list)
    why_not: str | None = None
    generator: bool = False  # a generator function's loop (its yield), not a __getitem__


class SampleLine(Part):
    line: int
    share: float  # of __getitem__'s time


class SampleWork(Part):
    """Where a PyDataset's `__getitem__` spent a few profiled calls (child/sample_work.py)."""

    file: str
    getitem_s: float  # seconds per call
    profiled: int
    lines: list[SampleLine] = Field(default_factory=list)  # its own lines, the most time first
    function: SampleFunction | None = None
    inline: InlineAugment | None = None  # told where no function of the script's takes the time
