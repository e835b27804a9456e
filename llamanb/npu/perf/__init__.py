"""The NPU2 performance side: the calibrated cost model, the per-step traffic counts and the
profile that lays them side by side."""
