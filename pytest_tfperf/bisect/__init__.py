"""``tfperf-bisect``, all of it in one folder: which first-parent commit between GOOD and BAD made the tests slower.

Its modules sit in the layers they belong to (tests/unit/test_layers.py
names each): ``search`` (the pure search, gates), ``report_text`` (its words
and JSON, reports), ``steps`` (git worktrees and one paired pytest session per
step) and ``select_plugin`` (the explained step's test selection), both
session, and ``cli`` (the command, cli). Nothing is imported here: the
package is as low as its lowest module.
"""
