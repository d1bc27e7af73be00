"""Code that runs inside a child process gpuscout starts, never in gpuscout's own process: the
measuring worker and what it measures with (the protocol, data, the backends' compiled steps,
inference servers, time to accuracy, a user's model), the doctor's probe and the TensorBoard
writer. These import Keras, TensorFlow or JAX; the parent talks to them only through
gpuscout.core.events and the RunSpec it hands them (tests/unit/test_architecture.py keeps it so).
"""
