"""Choosing the operating point: maps for candidate splits from one capture (`frontier`), their
measured quality-speed frontier as tables and plots (`frontier_report`), and `ridgefill tune`,
which measures it and picks the fastest point within a quality budget (`operating_point`).
Sits above fit, bench and evals, which it combines."""
