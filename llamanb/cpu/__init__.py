"""The cpu track: the course's C++ kernels (kernels/cpu) built for this CPU and run through
ctypes (kernels), the backend that drives them (backend), and what it needs here (readiness)."""
