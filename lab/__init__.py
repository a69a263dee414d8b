"""The maintainers' lab, outside the package: the held-out and validation studies of the search
(``study``, ``run_study.py``), their job files and logs.  Nothing installed reads from here."""
