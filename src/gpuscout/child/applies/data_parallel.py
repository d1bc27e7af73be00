"""data_parallel: the step on every device, set before the first layer is built."""

from __future__ import annotations

from gpuscout.child import tune_state

# Its place in the hooks it defines (child/applies): a distribution opened as Keras loads, before any layer exists
ORDER = 1


def on_keras() -> None:
    """The step on every device, each batch split across them: jax, Keras' DataParallel set before
    the first layer (what keras.distribution.set_distribution(DataParallel()) does in a script);
    TensorFlow, a MirroredStrategy made the process's default strategy when the first layer is
    made (as if the script built its model in the strategy's scope). The instrumentation's model
    facts then count the replicas."""
    if not tune_state.SETTINGS.data_parallel:
        return
    # keras' top-level package is still being imported here (on_keras): its own modules
    from keras.src.backend import backend

    if backend() == "tensorflow":
        _mirrored_at_first_layer()
        return
    from keras.src.distribution.distribution_lib import DataParallel, set_distribution

    distribution = DataParallel()
    set_distribution(distribution)
    devices = len(distribution.device_mesh.devices.flatten())
    tune_state.applied(
        "data_parallel",
        f"keras.distribution.set_distribution(keras.distribution.DataParallel()) before the "
        f"first layer: {devices} devices",
    )


def _mirrored_at_first_layer() -> None:
    """Not at import: making a strategy fixes TensorFlow's devices, and a script's own
    tf.config calls (memory growth, logical devices), which must come before that, would then
    fail. Every layer's construction passes Layer.__init__ (a subclass's super().__init__ too);
    the first one sets the strategy and puts Keras' own __init__ back."""
    from keras.src.layers.layer import Layer

    keras_init = Layer.__init__

    def first_layer(self, *args, **kwargs):
        Layer.__init__ = keras_init
        import tensorflow as tf

        # MirroredStrategy() takes every GPU, or one CPU without a GPU: the logical CPUs are named
        # so that a CPU split into devices (the tests) is spread over as GPUs would be
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus or tf.config.list_logical_devices("CPU")]
        tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy(devices))
        tune_state.applied(
            "data_parallel",
            "tf.distribute.experimental_set_strategy(tf.distribute.MirroredStrategy()) when "
            f"the first layer was made: {len(devices)} devices",
        )
        keras_init(self, *args, **kwargs)

    Layer.__init__ = first_layer
