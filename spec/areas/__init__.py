"""One module per area, each defining `AREA` (spec/area.py); found by discovery."""
