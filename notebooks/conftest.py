"""pytest's setup for the notebooks (nbval): the kernels it starts inherit this environment.

Progress lines (llamanb.platform.progress) appear only when a step runs long, so under nbval they would read
as changed outputs on a slow or loaded machine; they are turned off here. Nothing else changes.
"""
import os

os.environ["LLAMANB_PROGRESS"] = "off"
