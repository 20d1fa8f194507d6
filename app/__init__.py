"""The Streamlit dashboard (run it with `workbench app`). Pages in `app_pages/`, cached data access in
`data.py`, pure frame helpers in `derive.py`, pure Plotly builders in `charts.py`."""
