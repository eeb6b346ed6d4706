"""Host functions of custom calls used by tests (``custom_call`` names them ``module:function``)."""

import numpy as np

#: the host functions custom calls may name here
NKIPY_HOST_FUNCTIONS = ("scaled_add", "wrong_shape")


def scaled_add(config, a, b):
    """``a + s * b`` with the scale ``s`` in the config text."""
    return (a + np.float32(float(config)) * b).astype(a.dtype)


def wrong_shape(config, a):
    return a.reshape(-1)
