"""12. Keras: ``model.compile()`` in the training loop retraces the train step on every call.

The mistake: recompiling a Keras model to change something small between
steps, most often the learning rate (``model.compile(optimizer=SGD(lr))``
once per step or epoch). ``compile()`` drops the model's compiled
``train_function``, so the next ``train_on_batch`` or ``fit`` builds and
traces a new ``one_step_on_data`` graph: every call pays a full trace (about
150 ms for a two-layer model on 2 cores; 17-19 s for EfficientNetB0). Keras 3
hides that ``tf.function`` inside a plain Python ``train_function``, and
TensorFlow's retracing warning does not fire (each function traces once),
so it goes unnoticed. The fix changes the optimizer's learning-rate variable
in place (``model.optimizer.learning_rate.assign(lr)``, or a
``LearningRateSchedule``): one trace serves every call.

The gated metric is the number of traces in the steady state, counted by the
plugin from the model's compiled step functions: one per call for the mistake,
none for the fix.
"""

from __future__ import annotations

import itertools

from pytest_tfperf.catalog.scenario import Comparison, Metric, Scenario, Variant
from pytest_tfperf.catalog.sizes import CatalogSize, pick

KEY = "keras_retracing"
TITLE = "Keras model.compile() in the loop to change the learning rate vs assigning it in place"
METRIC = Metric.TRACES
# Each recompiled call traces (about 150 ms): a short budget still gives tens of calls.
TFPERF_MARKER = {"budget_s": 1.0}
COMPARISONS = (
    Comparison("anti", "fix", min_effect=0.9,
               measured_here="1 trace per call vs 0 in every run (Keras 3.15, TF 2.21: 2 catalog runs at small "
                             "size, 10 real-model-suite processes); median calls 71x and 170x faster in the 2 runs "
                             "on the shared 2-core machine"),
)


def build(size: CatalogSize) -> Scenario:
    import keras
    import numpy as np

    features = pick(size, small=16, default=64, large=256)
    batch = pick(size, small=8, default=32, large=256)
    rng = np.random.default_rng(12)
    x = rng.normal(size=(batch, features)).astype(np.float32)
    y = rng.normal(size=(batch, 1)).astype(np.float32)

    def model() -> keras.Model:
        m = keras.Sequential([keras.Input((features,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1)])
        m.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        return m

    recompiled, assigned = model(), model()
    rates = itertools.cycle([0.01, 0.005, 0.002, 0.001])

    def compile_each_step() -> float:
        # What a schedule written by hand often looks like: a new optimizer, a new compile.
        recompiled.compile(optimizer=keras.optimizers.SGD(next(rates)), loss="mse")
        return float(recompiled.train_on_batch(x, y))

    def assign_the_rate() -> float:
        assigned.optimizer.learning_rate.assign(next(rates))
        return float(assigned.train_on_batch(x, y))

    return Scenario(
        key=KEY,
        title=TITLE,
        metric=METRIC,
        items_per_iteration=batch,
        variants=(
            Variant("anti", compile_each_step, "model.compile(optimizer=SGD(lr)) before each train_on_batch"),
            Variant("fix", assign_the_rate, "model.optimizer.learning_rate.assign(lr), compiled once"),
        ),
        comparisons=COMPARISONS,
        sizes=(("features", features), ("batch", batch)),
    )
