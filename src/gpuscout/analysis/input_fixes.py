"""What a watched fit waiting on its input should change, by the kind of input (in-memory arrays on
jax, a generator, a PyDataset and the function its __getitem__ spends its time in, tf.data), with
the code to write: the input-bound verdict's fix (analysis/verdict.py)."""

from __future__ import annotations

import os

from gpuscout.record.augment import SAMPLE_WORK_SHARE, behind_layers
from gpuscout.record.watch import WatchedFit


def input_fix(main: WatchedFit, cores: int | None) -> tuple[str, str]:
    """What to change where a fit waits on its input, and the code: by the kind of input it is given."""
    input_type, backend = main.input_type, main.backend
    workers = cores or 4
    if input_type in ("numpy", "jax array") and backend == "jax":
        # keras' array_slicing.convert_to_sliceable: a jax array becomes a host numpy array first
        moved = "a JAX array is copied to host memory whole, then " if input_type == "jax array" else ""
        return (
            f"fit on in-memory arrays: {moved}each batch is gathered on one host thread and copied to the "
            "GPU. Keep the data on the GPU and hand fit device batches (or store uint8 and scale in the "
            "model: 4x fewer bytes per batch)",
            "x_gpu, y_gpu = jax.device_put(x), jax.device_put(y)   # once\n"
            "\n"
            "def batches():  # device slices: nothing crosses the host\n"
            "    while True:\n"
            "        for i in range(0, len(x_gpu) - batch_size + 1, batch_size):\n"
            "            yield x_gpu[i:i + batch_size], y_gpu[i:i + batch_size]\n"
            "\n"
            "model.fit(batches(), steps_per_epoch=len(x_gpu) // batch_size, epochs=...)",
        )
    if input_type == "generator":
        return (
            f"a Python generator feeds one batch at a time from one thread: run it in {workers} workers "
            "(a keras.utils.PyDataset), or build the batches with tf.data",
            "class Batches(keras.utils.PyDataset):\n"
            "    def __init__(self):\n"
            f"        super().__init__(workers={workers})  # threads; Python-bound: SpawnedWorkers (tune)\n"
            "    def __len__(self):\n"
            "        return steps_per_epoch\n"
            "    def __getitem__(self, i):\n"
            "        return make_batch(i)   # what the generator yielded\n"
            "\n"
            "model.fit(Batches(), epochs=...)",
        )
    if input_type == "PyDataset":
        work = main.sample_work.function if main.sample_work else None
        if work is not None and work.layers:  # its augmentation told as layers (child/sample_work.py)
            short = work.name.split(".")[-1]
            return (
                f"{work.name} ({os.path.basename(work.file)}:{work.line}) takes {work.share:.0%} of making each "
                "batch, one image at a time on the host: do it in the model with Keras preprocessing layers "
                "(on the device, the batch at once, only in training); `gpuscout tune` measures it",
                f"{behind_layers('model', work.input_shape, work.layers)}  # before compile\n"
                f"# in __getitem__ (line {work.call_line}): the {work.argument} as it is, not {short}(...)"
                + (
                    "\n# RandomCropEach: a crop per image that keeps XLA on; `gpuscout tune --patch` writes it"
                    if any(layer.own for layer in work.layers)
                    else ""
                ),
            )
        text, code = pydataset_fix(main.input_workers, main.input_multiprocessing, workers)
        if work is not None and work.share >= SAMPLE_WORK_SHARE:  # named, not told (a plain watch)
            text = (
                f"{work.name} ({os.path.basename(work.file)}:{work.line}) takes {work.share:.0%} of making each "
                f"batch on the host: {text}; or that work in the model (`gpuscout tune` tells whether it can be "
                "Keras layers on the device)"
            )
        elif main.sample_work is not None and main.sample_work.lines:  # its own lines take the time
            hot = main.sample_work.lines[0]
            text = (
                f"__getitem__'s own lines make each batch on the host ({os.path.basename(main.sample_work.file)}:"
                f"{hot.line} {hot.share:.0%} of its time): {text}; where they crop, flip or normalise each image, "
                "`gpuscout tune` moves them into the model as Keras layers (augment_inline)"
            )
        return text, code
    random = next((op for op in main.pipeline if op.op == "map" and op.repeats is False), None)
    if random is not None:  # a random map: an augmentation that layers could do on the device
        return (
            f"parallelise, cache and prefetch the pipeline (the tf.data performance guide); where the map at "
            f"{os.path.basename(random.file)}:{random.line} crops, flips or rescales each image, `gpuscout tune` "
            "moves it into the model as Keras layers (augment_map)",
            "dataset = (dataset.cache()\n"
            "           .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)\n"
            "           .batch(batch_size)\n"
            "           .prefetch(tf.data.AUTOTUNE))",
        )
    return (
        "parallelise, cache and prefetch the pipeline (the tf.data performance guide)",
        "dataset = (dataset.cache()\n"
        "           .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)\n"
        "           .batch(batch_size)\n"
        "           .prefetch(tf.data.AUTOTUNE))",
    )


def pydataset_fix(have: int | None, processes: bool | None, needed: int) -> tuple[str, str]:
    """What a PyDataset that keeps the loop waiting needs, from the workers it already has.
    Worker threads overlap only work that releases the GIL (I/O, most numpy): pure-Python work
    per batch (tokenising strings, decoding in Python) runs one thread at a time (measured on an
    H100 host: 6 threads ~1.0x, 6 processes ~1.4x over one thread, docs/watch.md). Processes are
    new interpreters (tune's SpawnedWorkers): Keras' use_multiprocessing=True forks the training
    process, which ran 8 workers at 0.38x of one thread under jax on an H200 host, where 8 spawned
    ones ran 2.33x (docs/benchmarks.md, 2026-12-02)."""
    have = have or 1
    spawned = (
        f"model.fit(SpawnedWorkers(dataset, workers={max(needed, have)}), ...)   # the class `gpuscout tune "
        "--patch` writes: new interpreters, never forked"
    )
    if have > 1 and not processes:
        return (
            f"it already has {have} worker threads: threads barely overlap pure-Python work under the GIL, "
            f"so make the batches in {max(needed, have)} worker processes of their own (not Keras' "
            "use_multiprocessing=True, which forks the training process: it hangs or crawls under JAX); "
            "`gpuscout tune` measures it and writes the class",
            spawned,
        )
    if processes and have >= needed:
        return (
            f"it already has {have} worker processes, as many as the wait asks for: make each batch cheaper "
            "(move the work into the model or a tf.data map)",
            "dataset = tf.data.Dataset.from_tensor_slices(raw).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)",
        )
    return (
        f"give the PyDataset more workers ({needed}, it has {have}): threads where its work waits on files "
        "or numpy, processes of their own where it is Python (`gpuscout tune` measures both)",
        f"super().__init__(workers={needed}, max_queue_size={2 * needed})   # threads\n" + spawned,
    )
