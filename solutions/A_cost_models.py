"""Solutions to the exercises of notebook 14 (the cost models' calibration)."""


def fit_two(calls, seconds):
    """launch_s and bytes_per_s from two calls.
    Why: each call is n t + w u = s with u = 1 / bytes_per_s; two calls with different launches
    per byte give two independent equations, solved here by Cramer's rule."""
    (n0, w0), (n1, w1) = calls
    s0, s1 = seconds
    det = n0 * w1 - n1 * w0
    t = (s0 * w1 - s1 * w0) / det
    u = (n0 * s1 - n1 * s0) / det
    return t, 1 / u


def elasticity(calls, seconds, held):
    """d log(prediction) / d log(seconds[i]) for a held-back call.
    Why: with the inverse of the 2 x 2 system written out, t and u are linear in (s0, s1), so the
    prediction n t + w u is g0 s0 + g1 s1; one figure's share of the prediction is its elasticity."""
    (n0, w0), (n1, w1) = calls
    n, w = held
    det = n0 * w1 - n1 * w0
    g0 = (n * w1 - w * n1) / det          # the coefficient of s0 in n t + w u
    g1 = (w * n0 - n * w0) / det          # the coefficient of s1
    s0, s1 = seconds
    p = g0 * s0 + g1 * s1
    return g0 * s0 / p, g1 * s1 / p
