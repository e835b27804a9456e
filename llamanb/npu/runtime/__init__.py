"""The NPU2 runtime side: buffer objects, the emulated and XRT devices, and the KernelCache that
holds every compiled group and its weights for a model."""
