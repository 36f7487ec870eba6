"""One module per system the comparison runner (perf/run.py) drives: the appliance and its peers."""

__all__: list[str] = []
