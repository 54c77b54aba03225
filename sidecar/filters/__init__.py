"""The filters an exchange runs through: one concern each (see `sidecar/exchange/filters.py`).

The order they run in is one list, with its reasons, in `sidecar/app.py` (`Sidecar.filters`).
"""
