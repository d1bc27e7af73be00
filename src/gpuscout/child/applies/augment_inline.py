"""augment_inline: the PyDataset's __getitem__, or the generator function fit's generator was made
by, rewritten to hand its images as read (its inline crop, flip and normalisation left out,
child/inline_augment.py), and the model trained behind the layers that do that work on the
device, as augment_in_model wraps it (the same wrapper)."""

from __future__ import annotations

from gpuscout.child import tune_state
from gpuscout.child.applies.augment_in_model import can_wrap, wrap
from gpuscout.child.applies.call import FitCall
from gpuscout.child.fit_input import input_type
from gpuscout.child.watch_state import is_pydataset

# Its place in the hooks it defines (child/applies): beside augment_in_model: moved out before the dataset is sent
# to processes
ORDER = 31


def fit_input(fit: FitCall) -> None:
    inline, x, model = tune_state.SETTINGS.augment_inline, fit.x, fit.model
    if not inline or not can_wrap(model):
        return
    if inline.get("generator") and input_type(x) == "generator":
        from gpuscout.child.inline_generator import hand_generator_as_read

        fit.x, where = hand_generator_as_read(x, inline)
    elif not inline.get("generator") and is_pydataset(x):
        from gpuscout.child.inline_augment import hand_images_as_read

        where = hand_images_as_read(x, inline)
    else:
        return
    wrap(model)
    tune_state.applied(
        "augment_inline", f"{where}; the model behind " + ", ".join(layer["name"] for layer in inline["layers"])
    )
