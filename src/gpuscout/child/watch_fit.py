"""One Keras `Model.fit`, timed (installed by gpuscout.child.watch_hook).

Its `train_function` is wrapped so that:

- the iterator it reads batches from is a timing proxy: the time blocked on the next batch is
  the input wait, exactly, on both backends (Keras' own Python path for an iterator that is not a
  tf.data one runs the same compiled one-step function);
- the time between two calls is the loop's time outside the step (callbacks, bookkeeping);
- every LIMITS.window_s seconds it waits for the last step's outputs, so the window's length (and the
  time per step) is the device's, not the dispatch's: one synchronisation a second, not per step;
- where a callback of the user's makes Keras wait for each step's logs (one that is not
  `async_safe` and has a batch-end hook: Keras then converts the logs to Python numbers after
  every step), the step ends where Keras has waited for them: gpuscout's StepEnd callback, first
  in the list, is called right after that wait (`step_ended`), so the wait, the device finishing
  the step, is not billed to the time between steps. The wrapper itself does not wait: Keras'
  own work after the dispatch (its state's bookkeeping, 0.3-0.5 ms a step on jax) still overlaps
  the device's step as in the user's run. Waiting in the wrapper put that work after the step and
  cost a host-fed loop 5-6% of its throughput (docs/benchmarks.md, "watch's cost on a host-fed fit");
- each callback of the user's is timed (its hooks wrapped on the instance), so an epoch says
  what its callbacks cost on the host (a ModelCheckpoint's save, a logger's work).
"""

from __future__ import annotations

import time

from gpuscout.child import tf_data, watch_state
from gpuscout.child.applies.augment_in_model import augments
from gpuscout.child.callback_times import CallbackTimes, waits_for_logs
from gpuscout.child.fit_input import (
    batch_bytes,
    batch_mark,
    batches_per_epoch,
    input_site,
    input_type,
    input_workers,
    leading_samples,
    mark_parts,
    static_batch_size,
)
from gpuscout.child.inline_generator import generator_made, told_for_the_record
from gpuscout.child.input_repeats import InputRepeats, observe
from gpuscout.child.model_facts import model_facts, optimizer_facts, peak_memory_bytes, sets_learning_rate
from gpuscout.child.sample_work import SampleWork
from gpuscout.child.step_outputs import last_loss, log_value, step_logs, wait_for
from gpuscout.child.watch_state import (
    STATE,
    emit,
    halt,
    interrupted_again,
    limit_reached,
    report_failure,
    stop_trace,
    trace,
    trace_toggles,
)
from gpuscout.core import decisions


class TimedIterator:
    """The batches a train_function reads, each fetch timed."""

    def __init__(self, inner, fit: FitWatch) -> None:
        self.inner, self.fit, self.exhausted = inner, fit, False

    def __iter__(self):
        return self

    def __next__(self):
        start = time.monotonic()
        try:
            batch = next(self.inner)
        except StopIteration:  # the epoch's end, as it would have been
            self.exhausted = True
            raise
        self.fit.input_wait_s += time.monotonic() - start
        self.fit.batches += 1
        if self.fit.unmarked:  # the epoch's first batch: which samples it holds (digested at its end)
            self.fit.unmarked = False
            self.fit.first_batch = mark_parts(batch)
        samples = leading_samples(batch)
        self.fit.samples += samples or 0
        if self.fit.batch_size is None:
            self.fit.batch_size, self.fit.batch_bytes = samples, batch_bytes(batch)
        return batch


class CountedIterator:
    """The batches a test_function reads during fit's validation, counted: Keras calls a batch's
    callbacks once per steps_per_execution steps, and a last call may read fewer."""

    def __init__(self, inner, fit: FitWatch) -> None:
        self.inner, self.fit, self.exhausted = inner, fit, False

    def __iter__(self):
        return self

    def __next__(self):
        try:
            batch = next(self.inner)
        except StopIteration:
            self.exhausted = True
            raise
        self.fit.validation_batches += 1
        return batch


class FitWatch:
    """One Model.fit call: its windows, epochs and the model's facts."""

    def __init__(self, model, x, callbacks=(), site: dict | None = None) -> None:
        self.limits = limits = watch_state.LIMITS  # what gpuscout asked of this run
        STATE.fits += 1
        self.site = site
        self.index, self.model, self.x = STATE.fits, model, x
        self.optimizer = optimizer_facts(getattr(model, "optimizer", None))
        self.sync_callbacks = [type(c).__name__ for c in callbacks if waits_for_logs(c)]
        # a callback of the user's that sets the learning rate as a number (tune scales it without a schedule)
        self.rate_callback = next((type(c).__name__ for c in callbacks if sets_learning_rate(c)), None)
        self.callbacks = CallbackTimes(callbacks)  # host seconds per callback, this epoch
        # do a PyDataset's epochs, or a generator's stream, repeat? (could they be kept: cache)
        self.repeats = (
            InputRepeats(batches_per_epoch(x))
            if limits.check_repeats and input_type(x) in ("PyDataset", "generator")
            else None
        )
        self.unobserve = lambda: None
        # where a PyDataset's __getitem__ spends its time (what moving its work into the model needs)
        self.sample_work = SampleWork.watching(x) if limits.check_repeats and input_type(x) == "PyDataset" else None
        # a generator's function and arguments, read before its first batch: its loop told as layers at the end
        self.generator_made = generator_made(x) if limits.tell_augmentation and input_type(x) == "generator" else None
        self.original_train_function = self.original_test_function = None
        self.batch_size = self.batch_bytes = None
        self.batches = self.samples = 0
        self.input_wait_s = 0.0
        self.outside_s = 0.0
        self.last_end = None  # end of the previous train_function call
        self.last_outputs = None
        self.call_batches = 0  # batches read before the current train_function call
        self.first_call = True
        self.window = None  # (start, batches, samples, input wait, outside, traced) at its start
        self.windows = 0
        self.epoch = None  # (epoch, start, batches, samples)
        self.unmarked = False  # the epoch's first batch is still to be read (batch_mark)
        self.first_batch = None
        self.validation_batches = 0
        self.validation_s, self.validation_began = 0.0, None  # the epoch's validation, on_test_begin to its end
        self.disabled = False
        self.params: dict = {}  # what fit told its callbacks: epochs, steps per epoch
        self.input_unseen = None  # steps per call, when the input is read inside the compiled loop

    # -- the train_function wrapper

    def wrap(self) -> None:
        original = self.model.train_function
        if original is None or getattr(original, "_gpuscout_watched", False):
            return
        self.original_train_function = original

        def timed(*args):
            interrupted_again()
            if self.disabled:
                return original(*args)
            *state, iterator = args
            start = time.monotonic()
            self.call_batches = self.batches
            if self.last_end is not None:
                self.outside_s += start - self.last_end
            if self.in_graph_input(iterator):
                outputs = original(*state, iterator)
                self.count_unseen_batches()
            else:
                batches = TimedIterator(iterator, self)
                try:
                    outputs = original(*state, batches)
                except UnboundLocalError:
                    # Keras' path for a Python iterator (tensorflow) meets an exhausted one with no
                    # step to return: the end of an epoch of unknown length, as StopIteration says
                    if batches.exhausted:
                        raise StopIteration from None
                    raise
            try:
                self.after_call(start, outputs)
            except Exception as exc:  # gpuscout's failure: stop observing, keep training
                self.disabled = True
                report_failure("watching a training step", exc)
            return outputs

        timed._gpuscout_watched = True
        self.model.train_function = timed

    def count_validation(self) -> None:
        """Validation's steps counted as its test_function reads them (once: Keras keeps the
        function for every epoch's validation)."""
        original = self.model.test_function
        if original is None or getattr(original, "_gpuscout_counted", False):
            return

        def counted(*args):
            *state, iterator = args
            spe = int(getattr(self.model, "steps_per_execution", 1) or 1)
            if spe > 1 and type(iterator).__module__.startswith("tensorflow"):
                self.validation_batches += spe  # read inside its compiled loop (in_graph_input): counted whole
                return original(*args)
            batches = CountedIterator(iterator, self)
            try:
                return original(*state, batches)
            except UnboundLocalError:  # as the train_function's: the end of data of unknown length
                if batches.exhausted:
                    raise StopIteration from None
                raise

        counted._gpuscout_counted = True
        self.original_test_function = original
        self.model.test_function = counted

    def step_ended(self) -> None:
        """Keras has waited for the step's logs (a callback of the user's asked for them): the time
        between steps starts now."""
        if not self.disabled and self.last_end is not None:
            self.last_end = time.monotonic()

    def in_graph_input(self, iterator) -> bool:
        """A tf.data iterator with steps_per_execution > 1 on tensorflow: Keras reads it inside its
        compiled loop of several steps, which a Python proxy would replace by one call per step
        (slower than the user's own run). It is left alone: steps are counted, the wait is not seen."""
        spe = int(getattr(self.model, "steps_per_execution", 1) or 1)
        if spe == 1 or not type(iterator).__module__.startswith("tensorflow"):
            return False
        if self.input_unseen is None:
            self.input_unseen = spe
            self.batch_size = static_batch_size(self.x)
        return True

    def count_unseen_batches(self) -> None:
        # The epoch's last call may run fewer steps: counted whole (at most one call per epoch).
        self.batches += self.input_unseen
        self.samples += self.input_unseen * (self.batch_size or 0)

    def unwrap(self) -> None:
        if self.original_train_function is not None:
            self.model.train_function = self.original_train_function
        if self.original_test_function is not None:
            self.model.test_function = self.original_test_function

    def after_call(self, start: float, outputs) -> None:
        now = time.monotonic()
        self.last_outputs = step_logs(outputs)
        if STATE.first_step is None:
            STATE.first_step = start
        # the training steps this call ran: one, or steps_per_execution (batches it read)
        STATE.steps += max(1, self.batches - self.call_batches)
        if self.first_call:  # compilation: measured to its end, then the windows start
            self.first_call = False
            wait_for(self.last_outputs)
            now = time.monotonic()
            STATE.timed_from = STATE.timed_from or now
            self.announce(compile_s=now - start)
            self.open_window(now)
        elif self.limits.window_ends(self.batches - self.window[1], now - self.window[0]):
            self.close_window()
            self.open_window(time.monotonic())
        self.last_end = time.monotonic()
        if trace_toggles(STATE.steps + 1):  # --trace-steps: the traced steps get a window of their own
            self.close_window()
            trace(STATE.steps + 1)
            self.open_window(time.monotonic())
        if limit_reached():
            self.end()
            halt()

    def open_window(self, now: float) -> None:
        self.window = (now, self.batches, self.samples, self.input_wait_s, self.outside_s, STATE.tracing)
        self.last_end = now

    def close_window(self) -> None:
        if self.window is None or self.batches == self.window[1]:
            return
        wait_for(self.last_outputs)
        end = time.monotonic()
        start, batches, samples, wait, outside, traced = self.window
        unseen = self.input_unseen is not None
        emit(
            "watch_window",
            fit=self.index,
            index=self.windows,
            start_monotonic_s=start,
            end_monotonic_s=end,
            steps=self.batches - batches,
            samples=None if unseen and not self.batch_size else self.samples - samples,
            input_wait_s=None if unseen else self.input_wait_s - wait,
            outside_step_s=self.outside_s - outside,
            traced=traced,
            loss=last_loss(self.last_outputs),
        )  # the step has ended: reading it waits for nothing
        self.windows += 1
        self.window = None

    # -- what the callback sees

    def epoch_begin(self, epoch: int) -> None:
        self.epoch = (epoch, time.monotonic(), self.batches, self.samples)
        self.callbacks.seconds = {}
        self.unmarked, self.first_batch, self.validation_batches = True, None, 0
        self.validation_s, self.validation_began = 0.0, None
        if self.window is None and not self.first_call:
            self.open_window(time.monotonic())

    def training_ended(self) -> None:
        """The epoch's training steps are done (validation, if any, comes next)."""
        self.close_window()
        if self.epoch is not None and len(self.epoch) == 4:
            self.epoch = (*self.epoch, time.monotonic())
        self.last_end = None

    def epoch_end(self, epoch: int, logs: dict | None) -> None:
        self.training_ended()
        if self.epoch is None:
            return
        number, start, batches, samples, end = self.epoch
        values = {str(k): log_value(v) for k, v in (logs or {}).items()}
        emit(
            "watch_epoch",
            fit=self.index,
            epoch=number + 1,
            start_monotonic_s=start,
            end_monotonic_s=end,
            steps=self.batches - batches,
            samples=self.samples - samples,
            logs=values,
            epoch_end_monotonic_s=time.monotonic(),
            callbacks_s=dict(self.callbacks.seconds),
            validation_steps=self.validation_batches,
            validation_s=self.validation_s,
            first_batch=batch_mark(self.first_batch),
        )
        self.epoch = None
        if decisions.wait_for(f"{self.index}-{number + 1}") == "stop":  # a sweep's pruner: fit ends, the script goes on
            self.model.stop_training = True

    def announce(self, compile_s: float) -> None:
        emit(
            "watch_fit",
            fit=self.index,
            **model_facts(self.model, self.x),
            **self.optimizer,
            batch_size=self.batch_size,
            batch_bytes=self.batch_bytes,
            compile_s=compile_s,
            started_monotonic_s=STATE.first_step,
            epochs=self.params.get("epochs"),
            input_in_graph=self.input_unseen is not None,
            steps_per_epoch=self.params.get("steps"),
            sync_callbacks=self.sync_callbacks,
            rate_callback=self.rate_callback,
            augmented_in_model=augments(self.model),
            sites={
                "fit": self.site,
                "compile": getattr(self.model, "_gpuscout_compiled_at", None),
                "input": input_site(self.x),
            },
            **input_workers(self.x),
        )

    def observed_input(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """fit's arguments with the input's host batches observed (whether they repeat)."""
        if self.repeats is None:
            return args, kwargs
        x, self.unobserve = observe(self.x, self.repeats)
        if x is not self.x:
            args, kwargs = ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "x": x})
        return args, kwargs

    def end(self) -> None:
        told = self.limits.tell_augmentation  # the function told as layers (tune's first baseline)
        self.training_ended()
        self.unwrap()
        self.unobserve()
        self.callbacks.untime()
        stop_trace()
        emit(
            "watch_fit_end",
            fit=self.index,
            steps=self.batches,
            samples=self.samples,
            peak_memory_bytes=peak_memory_bytes(),
            stopped_by_limit=STATE.limit_reached,
            last_loss=last_loss(self.last_outputs),
            **({"input_repeats": self.repeats.counts()} if self.repeats is not None else {}),
            **({"sample_work": self.sample_work.finish(told)} if self.sample_work is not None else {}),
            **({"generator_inline": told_for_the_record(self.generator_made)} if self.generator_made else {}),
        )
        if input_type(self.x) == "tf.data":  # after the timed steps: its repeat check makes elements again
            try:
                ops = tf_data.chain_of(self.x, self.limits.check_repeats, told)
                emit("watch_pipeline", fit=self.index, ops=ops)
            except Exception as exc:
                report_failure("reading the tf.data pipeline", exc)
