"""Serving many requests through one engine: continuous batching (notebook 10).

    request.py    a request: prompt, sampling, its tokens so far, where it is in its life
    scheduler.py  iteration-level scheduling: who runs in the next step, and how many rows
    runner.py     the loop: schedule -> engine.step -> sample and retire, once per iteration
                  (llamanb.engine.engine.Engine.step runs the rows; decode-only steps unpadded)
    dry.py        a stand-in for the model, to look at scheduling alone
    workload.py   request files (JSON / JSONL) and the benchmark's mixed workload
    cli.py        `python -m llamanb batch FILE`
"""
from llamanb.serve.request import Request, Status
from llamanb.serve.runner import BatchRunner
from llamanb.serve.scheduler import Scheduler

__all__ = ["BatchRunner", "Request", "Scheduler", "Status"]
