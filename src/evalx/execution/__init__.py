"""Execution: turn a config and a selection into cells, run them concurrently, resume, guard the spend.

Not named ``run``: ``evalx.run`` is the Python API's function (DESIGN.md, "Layout name clash").
"""
