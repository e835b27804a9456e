"""Run pytest with numpy's BLAS, numpy's own vector loops and torch on a second kernel family.

    python tests/run_portability.py PYTEST_ARGS...      (what `make test-portability` calls)

The variables come from llamanb.platform.blas.portability_env (OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES,
ATEN_CPU_CAPABILITY); the notebooks' kernels inherit them. A test or stored output that holds on
one kernel family only fails here."""
import os
import subprocess
import sys

from llamanb.platform.blas import portability_env

if __name__ == "__main__":
    env = portability_env()
    print("portability run:", ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    sys.exit(subprocess.call([sys.executable, "-m", "pytest", *sys.argv[1:]], env={**os.environ, **env}))
