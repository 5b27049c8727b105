"""The lab: hotpath beside rival servers (compare/) and one-off studies (studies/), each behind a report in
reports/. Not installed (pyproject's package list is hotpath's); run from a checkout's root as `python -m perf`.
Data flows one way: the lab imports hotpath, hotpath never imports the lab (tests/unit/test_layout.py)."""
