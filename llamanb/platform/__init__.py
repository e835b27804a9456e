"""This machine: the BLAS numpy runs on, the C++ compiler, device nodes and Python modules
(hardware), where llamanb keeps its cache (paths), progress lines for long steps, and the
calibration of cost models on published hardware figures (calibration)."""
