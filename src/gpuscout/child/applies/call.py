"""One call of `Model.fit` as the appliers change it: its arguments, its keywords and the model,
the input (`x`) read and replaced where fit was given it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FitCall:
    args: tuple
    kwargs: dict
    model: object

    @property
    def x(self):
        return self.args[0] if self.args else self.kwargs.get("x")

    @x.setter
    def x(self, value) -> None:
        if self.args:
            self.args = (value, *self.args[1:])
        else:
            self.kwargs["x"] = value
