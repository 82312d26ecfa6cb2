"""A Keras ``model.fit`` timed as docs/own-programs.md says: a callback around each batch.

``keras_fit.py BATCH STEPS``: a small MLP on random data, Keras's own progress bar
(ANSI colours, ``\\b`` and ``\\r``) on stdout as well.
"""

import sys
import time

import keras
import numpy as np
from dltop_report import report


class DltopSteps(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        report(time.perf_counter() - self.t0, loss=(logs or {}).get("loss"))


batch, steps = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.random((batch * steps, 20), dtype=np.float32)
y = rng.integers(0, 2, batch * steps)
model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(2, activation="softmax")])
model.compile("adam", "sparse_categorical_crossentropy")
model.fit(x, y, batch_size=batch, epochs=1, verbose=1, callbacks=[DltopSteps()])
