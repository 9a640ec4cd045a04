"""tests/lib/var_data.h in Python: what stoker-test-var-producer makes for example seq (every
byte follows from seq), and a way to start it against a Cluster. Shared by the variable-length
tests (a test module cannot import another: it runs its tests when imported)."""

import os
import subprocess

import numpy as np

VAR = os.environ.get("STOKER_VAR_PRODUCER_BIN", "build/tests/lib/stoker-test-var-producer")


def n_tokens(seq):
    return (seq * 2654435761) % (1 << 64) % 65


def n_points(seq):
    return (seq * 40503 + 7) % 5


def expected(seq):
    """(tokens bytes, points bytes) of example seq."""
    tokens = np.array([seq * 131 + j for j in range(n_tokens(seq))], dtype="<i4")
    points = np.array([[seq + r / 4, r / 8, -float(seq)] for r in range(n_points(seq))],
                      dtype="<f4").reshape(-1, 3)
    return tokens.tobytes(), points.tobytes()


def var_producer(c, name, count, *args):
    """Starts stoker-test-var-producer for Cluster c: count examples named name."""
    p = subprocess.Popen([VAR, c.url, name, str(count)] + [str(a) for a in args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    c.producers.append(p)
    return p
