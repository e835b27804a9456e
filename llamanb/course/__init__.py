"""The course machinery: jupytext pairs and executed notebooks (notebooks), widgets, exercises."""
