"""Solutions to the exercises of notebook 05 (seven NPU kernels)."""
import numpy as np


def bf16_round(x):
    """Round float32 to the nearest bfloat16 (ties to even) on the bits, returned as float32.
    Why: bf16 is the top 16 bits of a float32 (same sign and exponent, 7 mantissa bits); adding
    0x7FFF + (the lowest kept bit) before truncating rounds to nearest and sends a tie to the even
    neighbour. A carry out of the mantissa bumps the exponent, which is the right answer too."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def merge_partials(part1, part2):
    """Two partial softmaxes (row max m, sum l = sum e^(s-m), acc = sum e^(s-m) v) -> the whole's.
    Why: each side is exact relative to its own max; rescaling both to the common max m by
    e^(m_i - m) makes them sums of the same terms, which then simply add."""
    (m1, l1, a1), (m2, l2, a2) = part1, part2
    m = np.maximum(m1, m2)
    c1, c2 = np.exp(m1 - m), np.exp(m2 - m)
    return m, l1 * c1 + l2 * c2, a1 * c1 + a2 * c2
